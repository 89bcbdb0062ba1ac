#include "http/request_server.h"

#include <boost/beast/http.hpp>
#include <spdlog/spdlog.h>

#include <optional>

#include "http/api_key.h"
#include "http/openai.h"
#include "net/http_chunk.h"
#include "net/tcp_listen.h"

namespace uma {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;

namespace {

std::string head(unsigned status, std::string_view content_type, bool keep_alive) {
  return "HTTP/1.1 " + std::to_string(status) + " " +
         std::string(http::obsolete_reason(static_cast<http::status>(status))) + "\r\nContent-Type: " +
         std::string(content_type) + "\r\nConnection: " + (keep_alive ? "keep-alive" : "close") + "\r\n";
}

}  // namespace

struct RequestServer::Client {
  ConnectionPtr conn;
  std::string in;
  std::optional<http::request_parser<http::string_body>> parser;
  bool busy = false;  // an exchange is open
};

void HttpExchange::reply(unsigned status, std::string_view content_type, std::string_view body) {
  if (answered_ || streaming_) return;
  std::string out = head(status, content_type, request_.keep_alive);
  out += "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n";
  out.append(body);
  conn_->send(out);
  finish();
}

void HttpExchange::reply_error(const Status& st) { reply_json(openai::http_status(st.code()), openai::error_body(st)); }

void HttpExchange::start_events() {
  if (answered_ || streaming_) return;
  streaming_ = true;
  conn_->send(head(200, "text/event-stream", request_.keep_alive) +
              "Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n");
}

void HttpExchange::event(std::string_view json) {
  if (!streaming_ || answered_) return;
  std::string data = "data: ";
  data.append(json);
  data += "\n\n";
  conn_->send(http_chunk(data));
}

void HttpExchange::event_bytes(std::string_view sse) {
  if (!streaming_ || answered_ || sse.empty()) return;
  conn_->send(http_chunk(sse));
}

void HttpExchange::end_events() {
  if (!streaming_ || answered_) return;
  conn_->send("0\r\n\r\n");
  finish();
}

void HttpExchange::finish() {
  answered_ = true;
  if (done_) std::exchange(done_, nullptr)(request_.keep_alive);
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

void RequestServer::adopt(tcp::socket s) {
  boost::system::error_code ignored;
  if (stopped_ || clients_.size() >= static_cast<std::size_t>(config_.max_connections)) {
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
  return it != clients_.end() && it->second->in.size() > config_.max_header_bytes + config_.max_body_bytes;
}

void RequestServer::on_input(const ConnectionPtr& c, std::string_view bytes) {
  auto it = clients_.find(c->id());
  if (it == clients_.end()) return;
  it->second->in.append(bytes);
  serve(*it->second);
}

void RequestServer::on_close(const ConnectionPtr& c) { clients_.erase(c->id()); }

void RequestServer::on_failure(const ConnectionPtr& c, const char* what) {
  spdlog::error("{} {}: {}", config_.log_name, c->id(), what);
  c->close("failure");
}

bool RequestServer::authorized(std::string_view path, std::string_view authorization) const {
  if (config_.api_key.empty()) return true;
  for (const std::string& p : config_.open_paths) {
    if (p == path) return true;
  }
  return bearer_authorized(authorization, config_.api_key);
}

void RequestServer::serve(Client& cl) {
  if (cl.busy || cl.conn->closed() || cl.conn->state() == ConnState::kClosing || cl.in.empty()) return;
  if (!cl.parser) {
    cl.parser.emplace();
    cl.parser->eager(true);
    cl.parser->body_limit(config_.max_body_bytes);
    cl.parser->header_limit(static_cast<std::uint32_t>(config_.max_header_bytes));
  }
  beast::error_code ec;
  while (!cl.in.empty() && !cl.parser->is_done()) {
    const std::size_t used = cl.parser->put(asio::buffer(cl.in.data(), cl.in.size()), ec);
    cl.in.erase(0, used);
    if (ec == http::error::need_more) ec = {};
    if (ec || used == 0) break;
  }
  const ConnectionPtr conn = cl.conn;
  if (ec) {
    const bool body = ec == http::error::body_limit, header = ec == http::error::header_limit;
    const Status st(body ? ErrorCode::kPromptTooLarge : ErrorCode::kBadRequest,
                    body ? "request body over the limit" : header ? "request header over the limit"
                                                                  : "malformed HTTP request: " + ec.message());
    const unsigned status = header ? 431 : openai::http_status(st.code());
    const std::string bytes = openai::error_body(st);
    conn->send(head(status, "application/json", false) + "Content-Length: " + std::to_string(bytes.size()) + "\r\n\r\n" + bytes);
    return conn->close_when_flushed();
  }
  if (!cl.parser->is_done()) return;
  http::request<http::string_body> req = cl.parser->release();
  cl.parser.reset();
  HttpRequest r;
  r.method = req.method();
  const std::string_view target = req.target();
  const auto q = target.find('?');
  r.path = std::string(target.substr(0, q));
  if (q != std::string_view::npos) r.query = std::string(target.substr(q + 1));
  r.body = std::move(req.body());
  r.keep_alive = req.keep_alive();
  const auto auth = req.find(http::field::authorization);
  const std::string_view authorization = auth == req.end() ? std::string_view{} : std::string_view(auth->value());
  cl.busy = true;
  conn->set_state(ConnState::kBusy);
  const std::uint64_t id = conn->id();
  auto ex = std::make_shared<HttpExchange>(conn, std::move(r), [this, id](bool keep_alive) { exchange_done(id, keep_alive); });
  if (!authorized(ex->request().path, authorization)) {
    return ex->reply_error(Status(ErrorCode::kUnauthorized, "a valid key is required: Authorization: Bearer KEY"));
  }
  handler_(ex);
}

void RequestServer::exchange_done(std::uint64_t id, bool keep_alive) {
  auto it = clients_.find(id);
  if (it == clients_.end()) return;  // closed meanwhile
  Client& cl = *it->second;
  cl.busy = false;
  if (!keep_alive) return cl.conn->close_when_flushed();
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
