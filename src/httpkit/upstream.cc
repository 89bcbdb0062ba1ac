#include "httpkit/upstream.h"

#include <boost/asio/connect.hpp>
#include <boost/beast/http/error.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>

namespace uma {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;
using SteadyTime = std::chrono::steady_clock::time_point;

namespace {
std::string peer_key(const HostPort& to) { return to.host + ":" + std::to_string(to.port); }
}  // namespace

std::string host_header(const HostPort& hp) {
  const bool v6 = hp.host.find(':') != std::string::npos;
  return (v6 ? "[" + hp.host + "]" : hp.host) + ":" + std::to_string(hp.port);
}

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

// A connection and whoever uses it now: its Upstream while a request is on it, the pool while it
// waits (then anything it hears closes it, and its close takes it out of the pool).
class UpstreamLink final : public ConnectionOwner {
 public:
  ~UpstreamLink() override {
    user = nullptr;
    pool = nullptr;
    if (conn) conn->close("dropped");
  }
  ConnectionOwner* user = nullptr;
  UpstreamPool* pool = nullptr;  // set while idle in it
  ConnectionPtr conn;
  SteadyTime idle_since{};

 private:
  void on_input(const ConnectionPtr& c, std::string_view bytes) override {
    if (user != nullptr) return user->on_input(c, bytes);
    c->close("bytes on an idle connection");
  }
  void on_peer_eof(const ConnectionPtr& c) override {
    if (user != nullptr) return user->on_peer_eof(c);
    c->close("peer closed an idle connection");
  }
  bool input_full(const Connection& c) const override { return user != nullptr && user->input_full(c); }
  void on_close(const ConnectionPtr& c) override {
    if (user != nullptr) return user->on_close(c);
    if (pool != nullptr) pool->forget(this);
  }
  void on_failure(const ConnectionPtr& c, const char* what) override {
    if (user != nullptr) return user->on_failure(c, what);
    c->close("failure");
  }
};

UpstreamPool::~UpstreamPool() {
  auto all = std::move(idle_);
  idle_.clear();
  for (auto& [peer, links] : all) {
    for (auto& l : links) l->pool = nullptr;
  }
}

std::size_t UpstreamPool::idle() const {
  std::size_t n = 0;
  for (const auto& [peer, links] : idle_) n += links.size();
  return n;
}

std::shared_ptr<UpstreamLink> UpstreamPool::take(const std::string& peer) {
  auto it = idle_.find(peer);
  if (it == idle_.end()) return nullptr;
  const auto now = SteadyTime::clock::now();
  while (!it->second.empty()) {
    std::shared_ptr<UpstreamLink> l = std::move(it->second.back());  // the most recently used
    it->second.pop_back();
    l->pool = nullptr;
    if (!l->conn->closed() && now - l->idle_since < options_.max_idle) {
      ++reused_;
      return l;
    }
  }
  return nullptr;
}

void UpstreamPool::put(const std::string& peer, std::shared_ptr<UpstreamLink> link) {
  std::vector<std::shared_ptr<UpstreamLink>>& links = idle_[peer];
  link->user = nullptr;
  if (links.size() >= options_.max_idle_per_peer) {
    link->conn->close("enough idle connections");
    asio::post(io_, [dead = std::move(link)] {});  // never freed inside its own callback
    return;
  }
  link->pool = this;
  link->idle_since = SteadyTime::clock::now();
  links.push_back(std::move(link));
}

void UpstreamPool::forget(const UpstreamLink* link) {
  for (auto it = idle_.begin(); it != idle_.end(); ++it) {
    auto& links = it->second;
    const auto at = std::find_if(links.begin(), links.end(), [link](const auto& l) { return l.get() == link; });
    if (at == links.end()) continue;
    // Freed after the connection's callback returns (it runs on this link).
    asio::post(io_, [keep = std::move(*at)] {});
    links.erase(at);
    if (links.empty()) idle_.erase(it);
    return;
  }
}

std::shared_ptr<Upstream> Upstream::start(asio::io_context& io, const HostPort& to, std::string request,
                                           UpstreamSink* sink, const Options& options, UpstreamPool* pool) {
  auto u = std::make_shared<Upstream>(io, sink, options);
  u->pool_ = pool;
  u->to_ = to;
  u->request_ = std::move(request);
  if (std::shared_ptr<UpstreamLink> link = pool != nullptr ? pool->take(peer_key(to)) : nullptr) {
    u->reused_ = true;
    // Sent from the loop, never from inside start(): the sink is still setting up.
    asio::post(io, [u, link = std::move(link)]() mutable { u->send_on(std::move(link)); });
  } else {
    u->dial();
  }
  return u;
}

Upstream::Upstream(asio::io_context& io, UpstreamSink* sink, const Options& options)
    : io_(io), sink_(sink), options_(options), socket_(io), timer_(io), reader_(options.max_body_bytes) {}

Upstream::~Upstream() { abort(); }

void Upstream::abort() {
  sink_ = nullptr;
  finished_ = true;
  timer_.cancel();
  boost::system::error_code ignored;
  socket_.close(ignored);
  if (conn_) conn_->close("aborted");
}

void Upstream::dial() {
  boost::system::error_code ec;
  const auto addr = asio::ip::make_address(to_.host, ec);
  if (ec) {
    // Reported from the loop, never from inside start(): the sink is still setting up.
    asio::post(io_, [self = shared_from_this(), host = to_.host] { self->fail("not an IP address: " + host); });
    return;
  }
  timer_.expires_after(options_.connect_timeout);
  timer_.async_wait([weak = weak_from_this()](const boost::system::error_code& e) {
    auto self = weak.lock();
    if (e || !self || self->conn_) return;
    boost::system::error_code ignored;
    self->socket_.close(ignored);  // the connect completes with operation_aborted
  });
  socket_.async_connect(tcp::endpoint(addr, to_.port), [self = shared_from_this()](const boost::system::error_code& e) {
    self->timer_.cancel();
    if (self->finished_) return;
    if (e) return self->fail(e == asio::error::operation_aborted ? "connect timed out" : "connect: " + e.message());
    boost::system::error_code ignored;
    self->socket_.set_option(tcp::no_delay(true), ignored);
    ConnectionOptions options;
    options.log_name = "upstream";
    options.max_tx_bytes = self->options_.max_tx_bytes;
    options.eof_closes = false;  // EOF may end a reply (read to close); the reader decides
    auto link = std::make_shared<UpstreamLink>();
    ConnectionOwner& owner = *link;
    link->conn = std::make_shared<Connection>(StreamSocket(std::move(self->socket_)), 0, options, owner);
    if (self->pool_ != nullptr) ++self->pool_->dialled_;
    self->send_on(std::move(link));
  });
}

void Upstream::send_on(std::shared_ptr<UpstreamLink> link) {
  if (finished_) return;  // aborted meanwhile: the link's destructor closes its connection
  link_ = std::move(link);
  link_->user = this;
  conn_ = link_->conn;
  if (conn_->closed()) return fail("the kept-alive connection closed");
  conn_->send(request_);
  if (!reused_) request_.clear();  // nothing will send it again
  conn_->start_reading();
  if (sink_ != nullptr) sink_->on_sent();
}

void Upstream::fail(const std::string& why) {
  if (finished_) return;
  if (reused_ && !got_bytes_ && conn_) {
    // A kept-alive connection the server had closed: the request goes once more, on a new one.
    reused_ = false;
    conn_.reset();
    link_->user = nullptr;
    asio::post(io_, [dead = std::move(link_)] {});  // never freed inside its own callback
    reader_.reset();
    return dial();
  }
  finished_ = true;
  const auto self = shared_from_this();
  if (conn_) conn_->close("failed");
  if (sink_ != nullptr) sink_->on_failed(why, !head_seen_);
}

void Upstream::on_input(const ConnectionPtr&, std::string_view bytes) {
  const auto self = shared_from_this();  // the sink may drop us from a callback
  got_bytes_ = true;
  request_.clear();
  reader_.feed(bytes);
  parse();
}

void Upstream::parse() {
  std::string body, error;
  if (finished_) return;
  if (!reader_.pump(&body, &error)) return fail(error);
  note_head();
  if (sink_ != nullptr && !finished_ && !body.empty()) sink_->on_body(body);
  if (finished_ || !reader_.done()) return;
  finished_ = true;
  if (pool_ != nullptr && reader_.keep_alive() && reader_.buffered() == 0 && !conn_->closed()) {
    conn_.reset();
    pool_->put(peer_key(to_), std::move(link_));
  } else {
    conn_->close("reply whole");
  }
  if (sink_ != nullptr) sink_->on_end();
}

void Upstream::note_head() {
  if (head_seen_ || !reader_.head_done()) return;
  head_seen_ = true;
  if (sink_ != nullptr && !finished_) sink_->on_head(reader_.status(), reader_.streamed());
}

void Upstream::on_peer_eof(const ConnectionPtr&) {
  const auto self = shared_from_this();
  if (finished_) return;
  if (reader_.eof()) return parse();
  fail("the agent closed the connection mid-reply");
}

void Upstream::on_close(const ConnectionPtr&) {
  if (finished_) return;
  const auto self = shared_from_this();
  fail("connection lost");
}

void Upstream::on_failure(const ConnectionPtr&, const char* what) { fail(std::string("sink threw: ") + what); }

}  // namespace uma
