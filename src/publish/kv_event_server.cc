#include "publish/kv_event_server.h"

#include <spdlog/spdlog.h>

#include <utility>

#include "httpkit/http_wire.h"

namespace uma::publish {

namespace asio = boost::asio;

namespace {

std::string event_text(const cluster::KvEvent& e) { return "data: " + cluster::encode_kv_event(e) + "\n\n"; }

cluster::KvEvent delta_event(const cluster::BlockJournal::Delta& d, const cluster::AgentLoad& load) {
  cluster::KvEvent e;
  e.stored = d.stored;
  e.evicted = d.evicted;
  e.load = load;
  return e;
}

RequestServerConfig server_config(const KvEventConfig& c) {
  RequestServerConfig rc;
  rc.host = c.host;
  rc.port = c.port;
  rc.max_connections = c.max_subscribers;
  rc.limits = HttpLimits{8 * 1024, 0};
  rc.max_tx_bytes = c.max_tx_bytes;
  rc.log_name = "kv-events";
  return rc;
}

}  // namespace

KvEventServer::KvEventServer(asio::io_context& io, KvEventConfig config, cluster::BlockJournal& journal,
                             const ServerMetrics& metrics)
    : config_(std::move(config)), journal_(journal), metrics_(metrics),
      server_(io, server_config(config_), [this](const HttpExchangePtr& ex) { handle(ex); }), timer_(io) {}

KvEventServer::~KvEventServer() { stop(); }

void KvEventServer::start(std::string boot_id) {
  config_.boot_id = std::move(boot_id);
  stopped_ = false;
  last_sent_ = std::chrono::steady_clock::now();
  server_.start();
  arm_timer();
}

void KvEventServer::stop() {
  stopped_ = true;
  timer_.cancel();
  subscribers_.clear();
  server_.stop();
}

void KvEventServer::drain() {
  if (stopped_) return;
  stopped_ = true;
  timer_.cancel();
  cluster::KvEvent last = delta_event(journal_.take(), load());
  last.draining = true;
  const std::string bytes = event_text(last);
  server_.drain();  // first: each stream's connection then closes once its last bytes are out
  const std::vector<HttpExchangePtr> streams = std::exchange(subscribers_, {});
  for (const HttpExchangePtr& s : streams) {
    s->event_bytes(bytes);
    s->end_events();
  }
}

void KvEventServer::handle(const HttpExchangePtr& ex) {
  if (ex->request().method != boost::beast::http::verb::get || ex->request().path != "/kv-events") {
    return ex->reply_error(Status(ErrorCode::kNotFound, "only GET /kv-events is served here"));
  }
  // Everything changed so far goes to the streams already open first, so the snapshot this one
  // gets and the deltas after it fit together.
  const cluster::AgentLoad now = load();
  publish(journal_.take(), now);
  cluster::KvEvent snap;
  snap.snapshot = true;
  snap.boot_id = config_.boot_id;
  snap.block = config_.block;
  snap.stored = journal_.published();
  snap.load = now;
  ex->start_events();
  ex->event_bytes(event_text(snap));
  HttpExchange* raw = ex.get();
  ex->on_gone([this, raw] { std::erase_if(subscribers_, [raw](const HttpExchangePtr& s) { return s.get() == raw; }); });
  subscribers_.push_back(ex);
}

cluster::AgentLoad KvEventServer::load() const {
  cluster::AgentLoad l;
  l.active = metrics_.active_sessions.load(std::memory_order_relaxed);
  l.queued = metrics_.queued_sessions.load(std::memory_order_relaxed);
  l.backlog = metrics_.prefill_backlog_tokens.load(std::memory_order_relaxed);
  l.admitted = static_cast<std::int64_t>(metrics_.backlog_admitted.load(std::memory_order_relaxed));
  return l;
}

void KvEventServer::publish(const cluster::BlockJournal::Delta& d, const cluster::AgentLoad& load) {
  const auto now = std::chrono::steady_clock::now();
  std::string bytes;
  if (!d.empty() || !(load == last_load_)) {
    bytes = event_text(delta_event(d, load));
    last_load_ = load;
  } else if (now - last_sent_ >= config_.ping) {
    bytes = ": ping\n\n";
  } else {
    return;
  }
  last_sent_ = now;
  // A send may drop a slow reader, whose on_gone erases it: iterate over a copy.
  const std::vector<HttpExchangePtr> streams = subscribers_;
  for (const HttpExchangePtr& s : streams) s->event_bytes(bytes);
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

}  // namespace uma::publish
