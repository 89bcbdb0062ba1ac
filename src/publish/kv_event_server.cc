#include "publish/kv_event_server.h"

#include <spdlog/spdlog.h>

#include "net/http_chunk.h"
#include "net/tcp_listen.h"

namespace uma::cluster {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

namespace {

constexpr std::size_t kMaxRequestBytes = 8 * 1024;
constexpr std::string_view kStreamHeaders =
    "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n"
    "Connection: close\r\n\r\n";
constexpr std::string_view kNotFound =
    "HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\nContent-Length: 20\r\nConnection: close\r\n\r\n"
    "only GET /kv-events\n";

std::string sse(const KvEvent& e) { return http_chunk("data: " + encode_kv_event(e) + "\n\n"); }

}  // namespace

KvEventServer::KvEventServer(asio::io_context& io, KvEventConfig config, BlockJournal& journal,
                             const ServerMetrics& metrics)
    : io_(io), config_(std::move(config)), journal_(journal), metrics_(metrics), acceptor_(io),
      accept_loop_(io, acceptor_, "kv-events",
                   [this](tcp::socket s) {
                     boost::system::error_code ignored;
                     if (stopped_ || subscribers_.size() >= static_cast<std::size_t>(config_.max_subscribers)) {
                       s.close(ignored);
                       return;
                     }
                     s.set_option(tcp::no_delay(true), ignored);
                     ConnectionOptions options;
                     options.log_name = "kv-events";
                     options.max_tx_bytes = config_.max_tx_bytes;
                     options.eof_closes = true;
                     ConnectionOwner& owner = *this;
                     auto c = std::make_shared<Connection>(StreamSocket(std::move(s)), next_id_++, options, owner);
                     subscribers_[c->id()] = Sub{c, {}, false};
                     c->start_reading();
                   }),
      timer_(io) {}

KvEventServer::~KvEventServer() { stop(); }

Status KvEventServer::listen() { return listen_tcp(acceptor_, config_.host, config_.port, "kv events"); }

std::uint16_t KvEventServer::port() const { return bound_port(acceptor_); }

void KvEventServer::start(std::string boot_id) {
  config_.boot_id = std::move(boot_id);
  stopped_ = false;
  last_sent_ = std::chrono::steady_clock::now();
  accept_loop_.start();
  arm_timer();
}

void KvEventServer::stop() {
  if (stopped_) return;
  stopped_ = true;
  accept_loop_.stop();
  timer_.cancel();
  boost::system::error_code ignored;
  acceptor_.close(ignored);
  auto subs = std::move(subscribers_);
  subscribers_.clear();
  for (auto& [id, sub] : subs) sub.conn->close("agent stopping");
}

void KvEventServer::on_failure(const ConnectionPtr& c, const char* what) {
  spdlog::warn("kv-events {}: {}", c->id(), what);
  c->close("failure");
}

void KvEventServer::on_input(const ConnectionPtr& c, std::string_view bytes) {
  auto it = subscribers_.find(c->id());
  if (it == subscribers_.end() || it->second.streaming) return;  // a subscriber has nothing more to say
  Sub& sub = it->second;
  sub.request.append(bytes);
  if (sub.request.find("\r\n\r\n") == std::string::npos) {
    if (sub.request.size() > kMaxRequestBytes) c->close("request too large");
    return;
  }
  constexpr std::string_view kPath = "GET /kv-events";
  const char after = sub.request.size() > kPath.size() ? sub.request[kPath.size()] : '\0';
  if (sub.request.rfind(kPath, 0) != 0 || (after != ' ' && after != '?')) {
    c->send(kNotFound);
    c->close_when_flushed();
    return;
  }
  sub.streaming = true;
  sub.request.clear();
  // Everything changed so far goes to the streams already open first, so the snapshot this one
  // gets and the deltas after it fit together.
  const AgentLoad now = load();
  publish(journal_.take(), now);
  KvEvent snap;
  snap.snapshot = true;
  snap.boot_id = config_.boot_id;
  snap.block = config_.block;
  snap.stored = journal_.published();
  snap.load = now;
  std::string out(kStreamHeaders);
  out += sse(snap);
  c->send(out);
}

AgentLoad KvEventServer::load() const {
  AgentLoad l;
  l.active = metrics_.active_sessions.load(std::memory_order_relaxed);
  l.queued = metrics_.queued_sessions.load(std::memory_order_relaxed);
  l.backlog = metrics_.prefill_backlog_tokens.load(std::memory_order_relaxed);
  l.admitted = static_cast<std::int64_t>(metrics_.backlog_admitted.load(std::memory_order_relaxed));
  return l;
}

void KvEventServer::publish(const BlockJournal::Delta& d, const AgentLoad& load) {
  const auto now = std::chrono::steady_clock::now();
  std::string bytes;
  if (!d.empty() || !(load == last_load_)) {
    KvEvent e;
    e.stored = d.stored;
    e.evicted = d.evicted;
    e.load = load;
    bytes = sse(e);
    last_load_ = load;
  } else if (now - last_sent_ >= config_.ping) {
    bytes = http_chunk(": ping\n\n");
  } else {
    return;
  }
  last_sent_ = now;
  // send() may drop a slow reader, whose on_close erases it: iterate over a copy.
  std::vector<ConnectionPtr> streams;
  for (const auto& [id, sub] : subscribers_) {
    if (sub.streaming) streams.push_back(sub.conn);
  }
  for (const ConnectionPtr& c : streams) c->send(bytes);
}

void KvEventServer::tick() { publish(journal_.take(), load()); }

void KvEventServer::arm_timer() {
  timer_.expires_after(config_.flush);
  timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec || stopped_) return;
    tick();
    arm_timer();
  });
}

}  // namespace uma::cluster
