#include "httpkit/request_server.h"

#include <spdlog/spdlog.h>

#include <vector>

#include "httpkit/http_error.h"
#include "net/tcp_listen.h"

namespace uma {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

struct RequestServer::Client {
  ConnectionPtr conn;
  RequestReader reader;
  std::weak_ptr<HttpExchange> exchange;  // the one open: requests are answered in order
  bool busy = false;
};

HttpExchange::~HttpExchange() {
  if (orphaned_) --*held_after_close_;
}

void HttpExchange::reply(unsigned status, std::string_view content_type, std::string_view body) {
  if (answered_ || streaming_) return;
  conn_->send(http_reply(status, content_type, body, request_.keep_alive, cors_));
  finish();
}

void HttpExchange::reply_error(const Status& st) { reply_json(http_status(st.code()), http_error_body(st)); }

void HttpExchange::start_events(std::string_view content_type) {
  if (answered_ || streaming_) return;
  streaming_ = true;
  conn_->send(event_stream_head(request_.keep_alive, cors_, content_type.empty() ? "text/event-stream" : content_type));
}

void HttpExchange::event(std::string_view json) {
  if (streaming_ && !answered_) conn_->send(sse_chunk(json));
}

void HttpExchange::event_bytes(std::string_view sse) {
  if (streaming_ && !answered_ && !sse.empty()) conn_->send(http_chunk(sse));
}

void HttpExchange::end_events() {
  if (!streaming_ || answered_) return;
  conn_->send(kLastChunk);
  finish();
}

void HttpExchange::send_raw(std::string_view bytes) {
  if (!answered_) conn_->send(bytes);
}

void HttpExchange::finish() {
  answered_ = true;
  on_gone_ = nullptr;
  if (done_) std::exchange(done_, nullptr)(request_.keep_alive);
}

void HttpExchange::client_gone() {
  done_ = nullptr;
  if (answered_) return;
  orphaned_ = true;  // counted until the handler lets go of it
  ++*held_after_close_;
  if (on_gone_) std::exchange(on_gone_, nullptr)();
}

RequestServer::RequestServer(asio::io_context& io, RequestServerConfig config, Handler handler)
    : io_(io), config_(std::move(config)), handler_(std::move(handler)), acceptor_(io),
      accept_loop_(io, acceptor_, config_.log_name, [this](tcp::socket s) { adopt(std::move(s)); }), sweep_timer_(io) {}

RequestServer::~RequestServer() { stop(); }

Status RequestServer::listen() { return listen_tcp(acceptor_, config_.host, config_.port, config_.log_name); }

std::uint16_t RequestServer::port() const { return bound_port(acceptor_); }

void RequestServer::start() {
  stopped_ = false;
  accept_loop_.start();
  sweep();
}

void RequestServer::stop() {
  if (stopped_) return;
  stopped_ = true;
  accept_loop_.stop();
  sweep_timer_.cancel();
  boost::system::error_code ignored;
  acceptor_.close(ignored);
  std::vector<ConnectionPtr> open;
  for (auto& [id, cl] : clients_) open.push_back(cl->conn);
  for (const ConnectionPtr& c : open) c->close("server stopping");
}

void RequestServer::drain() {
  if (stopped_ || draining_) return;
  draining_ = true;
  // As Go's http.Server.Shutdown: idle connections close now, busy ones after their answer.
  std::vector<ConnectionPtr> idle;
  for (auto& [id, cl] : clients_) {
    if (!cl->busy && cl->reader.buffered() == 0) idle.push_back(cl->conn);
    if (const HttpExchangePtr ex = cl->exchange.lock()) ex->request_.keep_alive = false;  // its answer says close
  }
  for (const ConnectionPtr& c : idle) c->close("draining");
  // Connections the kernel completed before the close are served: closing the acceptor with them
  // queued would reset them after their client sent a request.
  accept_loop_.drain();
  boost::system::error_code ec;
  acceptor_.non_blocking(true, ec);
  for (;;) {
    tcp::socket s(io_);
    if (acceptor_.accept(s, ec); ec) break;
    adopt(std::move(s));
  }
  acceptor_.close(ec);
}

void RequestServer::adopt(tcp::socket s) {
  boost::system::error_code ignored;
  if (stopped_ || clients_.size() + *held_after_close_ >= static_cast<std::size_t>(config_.max_connections)) {
    s.close(ignored);
    return;
  }
  s.set_option(tcp::no_delay(true), ignored);
  ConnectionOptions options;
  options.log_name = config_.log_name;
  options.max_tx_bytes = config_.max_tx_bytes;
  options.eof_closes = true;
  ConnectionOwner& owner = *this;
  auto c = std::make_shared<Connection>(StreamSocket(std::move(s)), next_id_++, options, owner);
  auto cl = std::make_unique<Client>();
  cl->conn = c;
  clients_[c->id()] = std::move(cl);
  c->start_reading();
}

bool RequestServer::input_full(const Connection& c) const {
  auto it = clients_.find(c.id());
  return it != clients_.end() && it->second->reader.buffered() > config_.limits.max_header_bytes + config_.limits.max_body_bytes;
}

void RequestServer::on_input(const ConnectionPtr& c, std::string_view bytes) {
  auto it = clients_.find(c->id());
  if (it == clients_.end()) return;
  it->second->reader.feed(bytes);
  serve(*it->second);
}

void RequestServer::on_close(const ConnectionPtr& c) {
  auto it = clients_.find(c->id());
  if (it == clients_.end()) return;
  const HttpExchangePtr ex = it->second->exchange.lock();
  clients_.erase(it);
  if (ex) ex->client_gone();
}

void RequestServer::on_failure(const ConnectionPtr& c, const char* what) {
  spdlog::error("{} {}: {}", config_.log_name, c->id(), what);
  c->close("failure");
}

void RequestServer::serve(Client& cl) {
  if (cl.busy || cl.conn->closed() || cl.conn->state() == ConnState::kClosing) return;
  HttpRequest req;
  Status error;
  bool header_too_large = false;
  const ConnectionPtr conn = cl.conn;
  switch (cl.reader.next(config_.limits, &req, &error, &header_too_large)) {
    case RequestReader::Result::kNeedMore: return;
    case RequestReader::Result::kError:
      ++rejected_;
      conn->send(http_reply(header_too_large ? 431 : http_status(error.code()), "application/json",
                            http_error_body(error), false));
      return conn->close_when_flushed();
    case RequestReader::Result::kRequest: break;
  }
  if (draining_) req.keep_alive = false;  // the answer says the connection closes after it
  const AccessCheck access = check_access(config_.access, req);
  cl.busy = true;
  conn->set_state(ConnState::kBusy);
  const std::uint64_t id = conn->id();
  auto ex = std::make_shared<HttpExchange>(conn, std::move(req), access.cors,
                                           [this, id](bool keep_alive) { exchange_done(id, keep_alive); }, held_after_close_);
  cl.exchange = ex;
  switch (access.verdict) {
    case AccessCheck::Verdict::kPreflight: return ex->reply(204, "text/plain", "");
    case AccessCheck::Verdict::kUnauthorized:
      ++rejected_;
      return ex->reply_error(Status(ErrorCode::kUnauthorized, std::string(kKeyRequired)));
    case AccessCheck::Verdict::kPass: break;
  }
  handler_(ex);
}

void RequestServer::exchange_done(std::uint64_t id, bool keep_alive) {
  auto it = clients_.find(id);
  if (it == clients_.end()) return;  // closed meanwhile
  Client& cl = *it->second;
  cl.busy = false;
  cl.exchange.reset();
  if (!keep_alive || draining_) return cl.conn->close_when_flushed();
  if (cl.conn->state() == ConnState::kBusy) cl.conn->set_state(ConnState::kIdle);
  // A pipelined request is served after this handler returns (never inside the one answering).
  asio::post(io_, [this, id] {
    auto again = clients_.find(id);
    if (again != clients_.end()) serve(*again->second);
  });
}

void RequestServer::sweep() {
  const auto now = Connection::Clock::now();
  std::vector<ConnectionPtr> idle;
  for (auto& [id, cl] : clients_) {
    if (!cl->busy && now - cl->conn->quiet_since() > config_.timeout) idle.push_back(cl->conn);
  }
  for (const ConnectionPtr& c : idle) c->close("idle");
  sweep_timer_.expires_after(std::chrono::seconds(1));
  sweep_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec && !stopped_) sweep();
  });
}

}  // namespace uma
