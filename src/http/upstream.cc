#include "http/upstream.h"

#include <boost/asio/connect.hpp>
#include <boost/beast/http/error.hpp>
#include <spdlog/spdlog.h>

#include <charconv>

namespace uma {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;

bool parse_host_port(std::string_view url, HostPort* out) {
  if (const auto scheme = url.find("://"); scheme != std::string_view::npos) {
    if (url.substr(0, scheme) != "http") return false;
    url.remove_prefix(scheme + 3);
  }
  url = url.substr(0, url.find('/'));
  const auto colon = url.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return false;
  std::string_view host = url.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  unsigned port = 0;
  const std::string_view digits = url.substr(colon + 1);
  const auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), port);
  if (ec != std::errc() || p != digits.data() + digits.size() || port == 0 || port > 65535) return false;
  out->host = host == "localhost" ? "127.0.0.1" : std::string(host);
  out->port = static_cast<std::uint16_t>(port);
  return true;
}

std::shared_ptr<Upstream> Upstream::start(asio::io_context& io, const HostPort& to, std::string request,
                                           UpstreamSink* sink, const Options& options) {
  auto u = std::make_shared<Upstream>(io, sink, options);
  u->dial(to, std::move(request));
  return u;
}

Upstream::Upstream(asio::io_context& io, UpstreamSink* sink, const Options& options)
    : io_(io), sink_(sink), options_(options), socket_(io), timer_(io) {
  // Beast keeps a reference to the callback: it lives as long as the parser.
  on_chunk_ = [this](std::uint64_t, std::string_view body, boost::beast::error_code&) -> std::size_t {
    note_head();  // an eager parser reads the head and the first chunk in one put()
    if (sink_ != nullptr && !finished_) sink_->on_body(body);
    return body.size();
  };
}

Upstream::~Upstream() { abort(); }

void Upstream::abort() {
  sink_ = nullptr;
  finished_ = true;
  timer_.cancel();
  boost::system::error_code ignored;
  socket_.close(ignored);
  if (conn_) conn_->close("aborted");
}

void Upstream::dial(const HostPort& to, std::string request) {
  boost::system::error_code ec;
  const auto addr = asio::ip::make_address(to.host, ec);
  if (ec) {
    // Reported from the loop, never from inside start(): the sink is still setting up.
    asio::post(io_, [self = shared_from_this(), host = to.host] { self->fail("not an IP address: " + host); });
    return;
  }
  timer_.expires_after(options_.connect_timeout);
  timer_.async_wait([weak = weak_from_this()](const boost::system::error_code& e) {
    auto self = weak.lock();
    if (e || !self || self->conn_) return;
    boost::system::error_code ignored;
    self->socket_.close(ignored);  // the connect completes with operation_aborted
  });
  socket_.async_connect(tcp::endpoint(addr, to.port), [self = shared_from_this(), request = std::move(request)](
                                                          const boost::system::error_code& e) mutable {
    self->timer_.cancel();
    if (self->finished_) return;
    if (e) return self->fail(e == asio::error::operation_aborted ? "connect timed out" : "connect: " + e.message());
    boost::system::error_code ignored;
    self->socket_.set_option(tcp::no_delay(true), ignored);
    ConnectionOptions options;
    options.log_name = "upstream";
    options.max_tx_bytes = self->options_.max_tx_bytes;
    options.eof_closes = false;  // EOF may end a reply (read to close); the parser decides
    ConnectionOwner& owner = *self;
    self->conn_ = std::make_shared<Connection>(StreamSocket(std::move(self->socket_)), 0, options, owner);
    self->parser_.emplace();
    self->parser_->eager(true);
    self->parser_->header_limit(16 * 1024);
    self->parser_->body_limit(self->options_.max_body_bytes);
    // A chunked body (SSE) is handed on chunk by chunk, never collected.
    self->parser_->on_chunk_body(self->on_chunk_);
    self->conn_->send(request);
    self->conn_->start_reading();
    if (self->sink_ != nullptr) self->sink_->on_sent();
  });
}

void Upstream::fail(const std::string& why) {
  if (finished_) return;
  finished_ = true;
  const auto self = shared_from_this();
  if (conn_) conn_->close("failed");
  if (sink_ != nullptr) sink_->on_failed(why, !head_seen_);
}

void Upstream::on_input(const ConnectionPtr&, std::string_view bytes) {
  const auto self = shared_from_this();  // the sink may drop us from a callback
  in_.append(bytes);
  parse();
}

void Upstream::parse() {
  boost::beast::error_code ec;
  while (!finished_ && !in_.empty() && !parser_->is_done()) {
    const std::size_t used = parser_->put(asio::buffer(in_.data(), in_.size()), ec);
    in_.erase(0, used);
    if (ec == http::error::need_more) ec = {};
    if (ec) return fail("bad reply: " + ec.message());
    note_head();
    if (used == 0) break;
  }
  if (finished_ || !parser_->is_done()) return;
  finished_ = true;
  const std::string body = std::move(parser_->get().body());  // empty for a chunked one
  if (sink_ != nullptr && !body.empty()) sink_->on_body(body);
  conn_->close("reply whole");
  if (sink_ != nullptr) sink_->on_end();
}

void Upstream::note_head() {
  if (head_seen_ || !parser_->is_header_done()) return;
  head_seen_ = true;
  const auto& head = parser_->get();
  const bool sse = head[http::field::content_type].find("text/event-stream") != std::string_view::npos;
  if (sink_ != nullptr && !finished_) sink_->on_head(head.result_int(), sse);
}

void Upstream::on_peer_eof(const ConnectionPtr&) {
  const auto self = shared_from_this();
  if (finished_) return;
  if (parser_ && parser_->need_eof()) {
    boost::beast::error_code ec;
    parser_->put_eof(ec);
    if (!ec) return parse();
  }
  fail("the agent closed the connection mid-reply");
}

void Upstream::on_close(const ConnectionPtr&) {
  if (finished_) return;
  const auto self = shared_from_this();
  fail("connection lost");
}

void Upstream::on_failure(const ConnectionPtr&, const char* what) { fail(std::string("sink threw: ") + what); }

}  // namespace uma
