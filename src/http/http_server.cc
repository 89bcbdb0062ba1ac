#include "http/http_server.h"

#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <spdlog/spdlog.h>

#include "net/guarded.h"
#include "net/tx_queue.h"

#include <chrono>
#include <optional>

namespace uma {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;

namespace {

// One state per connection (memcached's conn_states), changed only through set_state(), which
// aborts on a transition the server was not written for.
enum class HttpConnState : std::uint8_t {
  kReading,    // reading a request (within --http-timeout-sec)
  kRunning,    // a completion runs; a read stays armed to see the client leave
  kThenRead,   // the reply is queued: when it is written, read the next request (keep-alive)
  kThenClose,  // the reply is queued (or the connection failed): when it is written, close
  kClosed,
};

const char* state_name(HttpConnState s) {
  constexpr const char* kNames[] = {"reading", "running", "then-read", "then-close", "closed"};
  return kNames[static_cast<std::size_t>(s)];
}

bool legal(HttpConnState from, HttpConnState to) {
  using S = HttpConnState;
  if (from == to) return from != S::kClosed;  // a repeated "then close" (an error answer) is a no-op
  switch (from) {
    case S::kReading: return true;
    case S::kRunning: return to != S::kReading;
    case S::kThenRead: return to != S::kRunning;
    case S::kThenClose: return to == S::kClosed;
    case S::kClosed: return false;
  }
  return false;
}

}  // namespace

struct HttpServer::Conn {
  Conn(tcp::socket s, std::size_t max_tx_bytes) : stream(std::move(s)), tx(max_tx_bytes) {}
  std::uint64_t id = 0;
  beast::tcp_stream stream;
  beast::flat_buffer buffer;
  std::optional<http::request_parser<http::string_body>> parser;
  bool keep_alive = true;
  HttpConnState state = HttpConnState::kReading;
  void set_state(HttpConnState to) {
    if (!legal(state, to)) {
      spdlog::critical("http conn {}: illegal state change {} -> {}", id, state_name(state), state_name(to));
      std::abort();
    }
    state = to;
  }
  bool closed() const { return state == HttpConnState::kClosed; }
  // What follows a reply that ends a request: the next request, or the end of the connection.
  HttpConnState after_reply(bool shutting_down) const {
    return keep_alive && !shutting_down ? HttpConnState::kThenRead : HttpConnState::kThenClose;
  }
  TxQueue tx;  // unsent bytes (queued and in flight), capped at max_tx_bytes
  // The completion being served.
  RequestId request = 0;
  openai::CompletionRequest req;
  std::string completion_id, text;
  std::int64_t created = 0;
  bool first_chunk = true;
  bool headers_sent = false;
  bool watching = false;
};

namespace {

std::string_view reason_phrase(unsigned status) {
  return http::obsolete_reason(static_cast<http::status>(status));
}

const char* finish_reason(FinishReason r) { return r == FinishReason::kLength ? "length" : "stop"; }

// The scheduler names the prompt when it does not fit; a chat request's prompt is its messages.
Status error_for(const openai::CompletionRequest& r, const Status& st) {
  if (r.chat && st.param() == "prompt") return Status(st.code(), st.message(), "messages");
  return st;
}

std::string chunked(std::string_view data) {  // one HTTP/1.1 chunk
  char size[24];
  const int n = std::snprintf(size, sizeof size, "%zx\r\n", data.size());
  std::string out(size, static_cast<std::size_t>(n));
  out.append(data);
  out += "\r\n";
  return out;
}

}  // namespace

HttpServer::HttpServer(asio::io_context& io, HttpConfig config, ServerMetrics& metrics, SessionSlots& slots,
                       WorkSubmit submit)
    : io_(io), config_(std::move(config)), metrics_(metrics), slots_(slots), submit_(std::move(submit)),
      table_(config_.max_connections, &metrics.http_connections_open, kFirstId), acceptor_(io),
      accept_loop_(io, acceptor_, "http", [this](tcp::socket s) { on_accept(std::move(s)); },
                   &metrics.accept_pauses_total) {}

HttpServer::~HttpServer() = default;

Status HttpServer::listen() {
  boost::system::error_code ec;
  const auto addr = asio::ip::make_address(config_.host, ec);
  if (ec) return Status(ErrorCode::kInvalidArgument, "--http: bad address '" + config_.host + "'");
  const tcp::endpoint ep(addr, config_.port);
  if (acceptor_.open(ep.protocol(), ec); ec) return Status(ErrorCode::kIo, "http socket: " + ec.message());
  acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
  if (acceptor_.bind(ep, ec); ec) {
    return Status(ErrorCode::kIo, "cannot bind " + config_.host + ":" + std::to_string(config_.port) + ": " + ec.message());
  }
  if (acceptor_.listen(asio::socket_base::max_listen_connections, ec); ec) return Status(ErrorCode::kIo, ec.message());
  return Status::Ok();
}

std::uint16_t HttpServer::port() const {
  boost::system::error_code ec;
  return acceptor_.local_endpoint(ec).port();
}

void HttpServer::start() { accept_loop_.start(); }

void HttpServer::set_ready(std::string model_id, ChatTemplate chat_template) {
  model_id_ = std::move(model_id);
  chat_template_ = std::move(chat_template);
  ready_ = true;
}

void HttpServer::on_accept(tcp::socket socket) {
  boost::system::error_code ec;
  if (shutting_down_) return;
  if (table_.full()) {
    metrics_.http_connections_rejected_total++;
    socket.close(ec);
    return;
  }
  // Tokens are small writes that must leave at once: no Nagle delay. A fixed send buffer keeps
  // what a slow reader has not taken here, under --max-tx-kib, not in an autotuned kernel buffer.
  socket.set_option(tcp::no_delay(true), ec);
  socket.set_option(asio::socket_base::send_buffer_size(64 * 1024), ec);
  auto c = std::make_shared<Conn>(std::move(socket), config_.max_tx_bytes);
  c->id = table_.next_conn_id();
  table_.add(c);
  metrics_.connections_accepted_total++;
  read_request(c);
}

template <typename F>
void HttpServer::guarded(const ConnPtr& c, F&& f) {
  run_guarded(std::forward<F>(f), [&](const char* what) { fail_internal(c, what); });
}

void HttpServer::fail_internal(const ConnPtr& c, const char* what) {
  metrics_.count_error(ErrorCode::kInternal);
  spdlog::error("http conn {}: internal error, connection closed: {}", c->id, what);
  if (c->closed()) return;
  try {
    if (c->request != 0) {
      submit_(CancelRequest{c->request});
      table_.unbind(c);
      slots_.give_back(FrontEnd::kHttp);
    }
    c->keep_alive = false;
    c->set_state(HttpConnState::kThenClose);
    if (!c->headers_sent) {
      c->headers_sent = true;
      return respond_error(c, ErrorCode::kInternal, "internal error");
    }
  } catch (...) {
  }
  close(c);
}

void HttpServer::read_request(const ConnPtr& c) {
  if (c->closed()) return;
  c->set_state(HttpConnState::kReading);
  c->parser.emplace();
  c->parser->body_limit(config_.max_body_bytes);
  c->parser->header_limit(static_cast<std::uint32_t>(config_.max_header_bytes));
  c->stream.expires_after(std::chrono::seconds(config_.timeout_sec));  // slow or idle clients
  http::async_read(c->stream, c->buffer, *c->parser, [this, c](beast::error_code ec, std::size_t) {
    if (!c->closed()) guarded(c, [&] { on_read(c, ec); });
  });
}

void HttpServer::on_read(const ConnPtr& c, beast::error_code ec) {
  if (ec == http::error::body_limit) {
    c->keep_alive = false;
    return respond_error(c, ErrorCode::kPromptTooLarge,
                         "request body over the limit of " + std::to_string(config_.max_body_bytes) + " bytes");
  }
  if (ec == http::error::end_of_stream || ec == beast::error::timeout || ec == asio::error::connection_reset ||
      ec == asio::error::eof) {
    return close(c);
  }
  if (ec == http::error::header_limit) {
    c->keep_alive = false;
    metrics_.count_error(ErrorCode::kBadRequest);
    return respond(c, 431, "application/json",
                   openai::error_body(ErrorCode::kBadRequest, "request headers over the limit of " +
                                                                  std::to_string(config_.max_header_bytes) + " bytes"));
  }
  if (ec) {
    c->keep_alive = false;
    return respond_error(c, ErrorCode::kBadRequest, "malformed HTTP request: " + ec.message());
  }
  on_request(c);
}

void HttpServer::on_request(const ConnPtr& c) {
  const auto& req = c->parser->get();
  c->keep_alive = req.keep_alive();
  c->stream.expires_never();
  http_route::Context ctx;
  ctx.ready = ready_;
  ctx.shutting_down = shutting_down_;
  ctx.model_id = model_id_;
  ctx.chat_template = &chat_template_;
  ctx.limits = &config_.limits;
  ctx.default_sampling = &config_.default_sampling;
  ctx.metrics = &metrics_;
  http_route::Routed routed = http_route::route(req.method(), req.target(), req.body(), ctx);
  if (routed.completion_endpoint) metrics_.requests_total++;
  if (auto* reply = std::get_if<http_route::Reply>(&routed.action)) {
    if (reply->error != ErrorCode::kOk) metrics_.count_error(reply->error);
    return respond(c, reply->status, reply->content_type, reply->body);
  }
  start_completion(c, std::move(std::get<http_route::Completion>(routed.action)));
}

void HttpServer::start_completion(const ConnPtr& c, http_route::Completion completion) {
  if (!slots_.try_take(FrontEnd::kHttp)) {
    metrics_.count_error(ErrorCode::kTooManySessions);
    metrics_.count_rejected(RejectReason::kSessionCap);
    return respond_error(c, ErrorCode::kTooManySessions, "all " + std::to_string(slots_.max()) + " sessions are in use");
  }
  const bool chat = completion.api.chat;
  Request q = std::move(completion.request);
  q.id = table_.bind(c);
  q.received_at = Clock::now();
  c->req = std::move(completion.api);
  c->completion_id = (chat ? "chatcmpl-" : "cmpl-") + std::to_string(q.id - kFirstId);
  c->created = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  c->text.clear();
  c->first_chunk = true;
  c->headers_sent = false;
  c->set_state(HttpConnState::kRunning);
  if (c->req.stream) {
    c->headers_sent = true;
    send(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
            "Transfer-Encoding: chunked\r\nConnection: " + std::string(c->keep_alive ? "keep-alive" : "close") + "\r\n\r\n");
  }
  submit_(std::move(q));
  watch_disconnect(c);
}

void HttpServer::watch_disconnect(const ConnPtr& c) {
  // A read stays armed while the completion runs: EOF or an error means the client left.
  if (c->watching || c->closed()) return;
  c->watching = true;
  c->stream.async_read_some(c->buffer.prepare(4096), [this, c](beast::error_code ec, std::size_t n) {
    c->watching = false;
    if (c->closed()) return;
    guarded(c, [&] {
      if (!ec) c->buffer.commit(n);  // a pipelined request: parsed after this one
      if (c->request == 0) {
        // The completion has ended and its reply is written: on to the next request (this read
        // was cancelled for it, or brought its first bytes).
        if (c->state == HttpConnState::kThenRead && (!ec || ec == asio::error::operation_aborted)) {
          return read_request(c);
        }
        if (!ec || ec == asio::error::operation_aborted) return;
      } else if (!ec) {
        if (c->buffer.size() < config_.max_body_bytes) watch_disconnect(c);
        return;
      }
      if (c->request != 0) metrics_.disconnects_mid_stream_total++;
      close(c);
    });
  });
}

void HttpServer::deliver(std::vector<Event> events) {
  asio::post(io_, [this, events = std::move(events)]() mutable { on_events(events); });
}

void HttpServer::on_events(std::vector<Event>& events) {
  for (Event& ev : events) {
    const ConnPtr c = table_.find(ev.request_id);  // a copy: ending the completion erases the map's
    if (c == nullptr) continue;
    guarded(c, [&] { on_event(c, ev); });
  }
}

void HttpServer::on_event(const ConnPtr& c, Event& ev) {
  const openai::CompletionRequest& r = c->req;
  switch (ev.kind) {
    case Event::Kind::kToken:
      if (!r.stream) {
        c->text += ev.text;
      } else {
        send_sse(c, openai::chunk(r, c->completion_id, c->created, ev.text, "", c->first_chunk));
        c->first_chunk = false;
      }
      return;
    case Event::Kind::kDone: {
      const openai::Usage usage{ev.prompt_tokens, ev.completion_tokens};
      if (r.stream) {
        send_sse(c, openai::chunk(r, c->completion_id, c->created, "", finish_reason(ev.reason), c->first_chunk));
        if (r.include_usage) send_sse(c, openai::usage_chunk(r, c->completion_id, c->created, usage));
        send_sse(c, "[DONE]");
        send(c, "0\r\n\r\n");
      } else {
        respond(c, 200, "application/json",
                openai::response(r, c->completion_id, c->created, c->text, finish_reason(ev.reason), usage));
      }
      break;
    }
    case Event::Kind::kError:
      metrics_.count_error(ev.error.code());
      if (c->headers_sent) {  // mid-stream: an error event, then the end of the stream
        send_sse(c, openai::error_body(error_for(r, ev.error)));
        send_sse(c, "[DONE]");
        send(c, "0\r\n\r\n");
      } else {
        respond(c, openai::http_status(ev.error.code()), "application/json", openai::error_body(error_for(r, ev.error)));
      }
      break;
  }
  end_completion(c);
}

void HttpServer::end_completion(const ConnPtr& conn) {
  const ConnPtr c = conn;  // `conn` may be the map's own pointer, erased here
  table_.unbind(c);
  slots_.give_back(FrontEnd::kHttp);
  if (c->closed()) return;  // the client left; its cancel's last event ends it here
  c->set_state(c->after_reply(shutting_down_));
  if (c->tx.flushed()) send(c, "");
}

void HttpServer::respond(const ConnPtr& c, unsigned status, std::string_view content_type, std::string_view body) {
  std::string head = "HTTP/1.1 " + std::to_string(status) + " " + std::string(reason_phrase(status)) +
                     "\r\nContent-Type: " + std::string(content_type) + "\r\nContent-Length: " +
                     std::to_string(body.size()) + "\r\nConnection: " + (c->keep_alive ? "keep-alive" : "close") + "\r\n\r\n";
  head.append(body);
  if (c->request == 0) c->set_state(c->after_reply(shutting_down_));  // a completion's end: end_completion decides
  send(c, std::move(head));
}

void HttpServer::respond_error(const ConnPtr& c, ErrorCode code, std::string_view message) {
  respond(c, openai::http_status(code), "application/json", openai::error_body(code, message));
}

void HttpServer::send_sse(const ConnPtr& c, std::string_view data) {
  std::string event = "data: ";
  event.append(data);
  event += "\n\n";
  send(c, chunked(event));
}

void HttpServer::send(const ConnPtr& c, std::string bytes) {
  if (c->closed()) return;
  if (!c->tx.push(bytes)) {
    // A reader too slow to keep up: drop it (and its request) rather than buffer without bound.
    metrics_.tx_drops_total++;
    return close(c);
  }
  if (c->tx.writing()) return;
  if (c->tx.flushed()) {
    // Nothing left to write: what the reply asked for next.
    if (c->state == HttpConnState::kThenClose) return close(c);
    if (c->state == HttpConnState::kThenRead && c->request == 0) {
      // Only one read at a time: a disconnect watch still armed is cancelled and its handler
      // starts the next read.
      if (c->watching) {
        beast::error_code ignored;
        c->stream.socket().cancel(ignored);
        return;
      }
      return read_request(c);
    }
    return;
  }
  const std::string_view out = c->tx.begin_write();
  asio::async_write(c->stream, asio::buffer(out.data(), out.size()), [this, c](beast::error_code ec, std::size_t) {
    c->tx.finish_write();
    guarded(c, [&] {
      if (ec) return close(c);
      send(c, "");
    });
  });
}

void HttpServer::close(const ConnPtr& c) {
  if (c->closed()) return;
  // Close-with-cancel, in this one place: a client gone (or dropped) mid-request frees its KV at
  // the next tick.
  if (c->request != 0) submit_(CancelRequest{c->request});
  c->set_state(HttpConnState::kClosed);
  beast::error_code ec;
  c->stream.socket().shutdown(tcp::socket::shutdown_both, ec);
  c->stream.close();
  table_.remove(c);
  // A completion still running keeps its table entry until its last event, so the session
  // count stays right; its writes are dropped.
}

void HttpServer::begin_shutdown() {
  shutting_down_ = true;
  accept_loop_.stop();
  boost::system::error_code ec;
  acceptor_.close(ec);
}

void HttpServer::finish_shutdown() {
  for (const ConnPtr& c : table_.snapshot()) close(c);
}

}  // namespace uma
