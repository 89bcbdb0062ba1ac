#include "gateway/cold_loads.h"

#include <boost/asio/post.hpp>
#include <algorithm>
#include <random>
#include <spdlog/spdlog.h>

#include "cluster/model_catalog.h"
#include "httpkit/http_wire.h"
#include "httpkit/upstream.h"

namespace uma::gateway {

namespace asio = boost::asio;

namespace {

// Only the owner's lock is renewed or deleted: a lock that lapsed and was taken by another
// gateway is left alone.
constexpr const char* kRenew =
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end";
constexpr const char* kRelease =
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end";
// After a load that succeeded the lock stays one more ttl (marked done): other gateways, whose
// views may not show the new agent yet, keep waiting for it instead of loading it again.
constexpr const char* kLoaded =
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('set', KEYS[1], 'loaded-by-' .. ARGV[1], 'PX', ARGV[2]) "
    "else return 0 end";

}  // namespace

// One POST to a loader's management API (/load with stream false, /prefetch): one answer at the
// end, `done` with an error unless it was a 2xx.
struct ColdLoads::Call final : UpstreamSink {
  std::function<void(const Status&)> done;
  std::shared_ptr<Upstream> up;
  unsigned status = 0;
  std::string body;
  void on_head(unsigned s, bool) override { status = s; }
  void on_body(std::string_view bytes) override {
    if (body.size() < 4096) body.append(bytes.substr(0, 4096 - body.size()));
  }
  void on_end() override {
    done(status / 100 == 2 ? Status() : Status(ErrorCode::kUnavailable, "the loader answered " + std::to_string(status) + ": " + body));
  }
  void on_failed(const std::string& why, bool) override {
    done(Status(ErrorCode::kUnavailable, "the loader could not be reached: " + why));
  }
};

struct ColdLoads::Model {
  LoadAttempt attempt;  // idle -> locking -> loading -> backoff (gateway/dispatch_policy.h)
  std::vector<cluster::LoaderState> loaders;  // as ensure() last saw them
  std::unique_ptr<Call> call;
  std::unique_ptr<asio::steady_timer> renewal;
  std::chrono::steady_clock::time_point started_at{};
  double predicted_s = 0;
  std::string loader;  // where ours runs
  std::uint64_t bytes = 0;
  std::string last_error;
};

ColdLoads::ColdLoads(asio::io_context& io, cluster::RedisAddress redis, ColdLoadOptions options)
    : io_(io), redis_(std::move(redis)), options_(std::move(options)), thread_([this] { run(); }) {}

ColdLoads::~ColdLoads() {
  *alive_ = false;
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
  for (auto& [id, m] : models_) {
    if (m->call && m->call->up) m->call->up->abort();
  }
  for (auto& [id, p] : prefetches_) {
    if (p->up) p->up->abort();
  }
}

void ColdLoads::on_redis(Task task) {
  {
    std::lock_guard lock(mu_);
    tasks_.push_back(std::move(task));
  }
  cv_.notify_all();
}

void ColdLoads::run() {
  cluster::RedisClient redis(redis_, std::chrono::milliseconds(500));
  std::unique_lock lock(mu_);
  while (true) {
    cv_.wait(lock, [this] { return stopping_ || !tasks_.empty(); });
    if (stopping_) return;
    Task t = std::move(tasks_.front());
    tasks_.pop_front();
    lock.unlock();
    t(redis);
    lock.lock();
  }
}

std::string ColdLoads::last_error(const std::string& model) const {
  auto it = models_.find(model);
  return it == models_.end() ? "" : it->second->last_error;
}

void ColdLoads::ensure(const std::string& model, const std::vector<cluster::LoaderState>& loaders) {
  std::unique_ptr<Model>& slot = models_[model];
  if (!slot) slot = std::make_unique<Model>();
  Model& m = *slot;
  if (!m.attempt.want_lock(std::chrono::steady_clock::now())) return;
  m.loaders = loaders;
  const std::string key = cluster::load_lock_key(model), owner = options_.owner, ttl = std::to_string(options_.lock_ttl.count());
  on_redis([this, alive = alive_, model, key, owner, ttl](cluster::RedisClient& redis) {
    cluster::RedisReply r;
    Status st = redis.command({"SET", key, owner, "NX", "PX", ttl}, &r);
    const bool acquired = st.ok() && r.kind == cluster::RedisReply::Kind::kString && r.str == "OK";
    cluster::CatalogModel entry;
    if (acquired) st = cluster::catalog_get(redis, model, &entry);
    asio::post(io_, [this, alive, model, acquired, bytes = entry.bytes, st] {
      if (*alive) locked(model, acquired, bytes, st);
    });
  });
}

void ColdLoads::locked(const std::string& model, bool acquired, std::uint64_t bytes, const Status& st) {
  Model& m = *models_[model];
  const auto release = [&] {
    on_redis([key = cluster::load_lock_key(model), owner = options_.owner](cluster::RedisClient& redis) {
      (void)redis.command({"EVAL", kRelease, "1", key, owner});
    });
  };
  if (!acquired || !st.ok()) {
    if (acquired) release();
    if (!acquired && st.ok()) counters_.lock_busy++;
    if (!st.ok()) m.last_error = st.message();
    m.attempt.lock_result(false, std::chrono::steady_clock::now(), options_.retry);
    return;
  }
  for (cluster::LoaderState& l : m.loaders) {
    const std::uint64_t ours = inflight_.count(l.id) ? inflight_[l.id] : 0;
    l.queue_bytes += ours;
    l.held_bytes += ours;
  }
  int at = cluster::choose_loader(m.loaders, model, bytes);
  if (at >= 0 && options_.policy != LoadPolicy::kPredicted) {
    std::vector<int> room;
    for (std::size_t i = 0; i < m.loaders.size(); ++i) {
      if (cluster::predicted_load_s(m.loaders[i], model, bytes, {}) >= 0) room.push_back(static_cast<int>(i));
    }
    static thread_local std::mt19937_64 rng{std::random_device{}()};
    at = room[options_.policy == LoadPolicy::kRoundRobin ? cursor_++ % room.size() : rng() % room.size()];
  }
  if (at < 0 && options_.live_migration && served_elsewhere_ && move_streams_) {
    const cluster::Migration mg = cluster::choose_migration(m.loaders, model, bytes, served_elsewhere_);
    if (mg.loader >= 0) {
      // Its load waits at the loader for the room those models leave once their streams are gone.
      at = mg.loader;
      migrate(m.loaders[static_cast<std::size_t>(at)].id, model, mg.models);
    }
  }
  if (at < 0) {
    release();
    m.last_error = m.loaders.empty() ? "no agent can load models (no loader is registered)"
                                     : "no agent has room for it: their model budgets are held by models in use";
    m.attempt.no_loader(std::chrono::steady_clock::now(), options_.retry);
    return;
  }
  m.attempt.lock_result(true, std::chrono::steady_clock::now(), options_.retry);
  start_load(model, m.loaders[static_cast<std::size_t>(at)], bytes);
}

void ColdLoads::migrate(const std::string& loader, const std::string& model, const std::vector<std::string>& models) {
  const std::size_t moved = move_streams_(loader, models);
  if (moved == 0) return;  // none of this gateway's there (any more): nothing to count
  counters_.migrations++;
  std::string names;
  for (const std::string& x : models) names += (names.empty() ? "" : ", ") + x;
  spdlog::info("live migration: moved {} streams of {} off {} to make room for {}", moved, names, loader, model);
}

void ColdLoads::make_room_for_queued(const std::vector<cluster::LoaderState>& loaders) {
  if (!options_.live_migration || !served_elsewhere_ || !move_streams_) return;
  // Every sweep: streams moved once are elsewhere by the next (none to move again, however long
  // the view shows the model in use there), and one routed there since goes too.
  for (const cluster::LoaderState& l : loaders) {
    for (const cluster::LoaderModel& x : l.models) {
      if (x.state != cluster::ModelState::kQueued) continue;
      const std::vector<std::string> models = cluster::migration_for_queued_load(l, x.name, x.bytes, served_elsewhere_);
      if (!models.empty()) migrate(l.id, x.name, models);
    }
  }
}

std::string ColdLoads::loader_request(const std::string& host, const std::string& path, const std::string& body) const {
  return http_request({.method = "POST", .target = path, .host = host, .body = body, .bearer = options_.api_key, .keep_alive = false});
}

std::vector<cluster::LoaderState> ColdLoads::with_own_loads(std::vector<cluster::LoaderState> loaders) const {
  const auto now = std::chrono::steady_clock::now();
  for (const auto& [model, own] : own_loads_) {
    if (now - own.at > options_.lock_ttl + options_.load_timeout) continue;
    for (cluster::LoaderState& l : loaders) {
      if (l.id == own.loader && l.model(model) == nullptr) l.models.push_back({model, cluster::ModelState::kQueued});
    }
  }
  return loaders;
}

void ColdLoads::prefetch(const std::string& model, const cluster::LoaderState& to, const std::string& tier) {
  HostPort hp;
  if (!parse_host_port(to.address, &hp)) return;
  counters_.prefetches++;
  spdlog::info("fan-out: prefetching {} to {} on {}", model, tier, to.id);
  auto call = std::make_unique<Call>();
  const std::uint64_t id = next_prefetch_++;
  call->done = [this, id, what = model + " -> " + to.id](const Status& st) { prefetched(id, what, st); };
  Upstream::Options uo;
  uo.max_body_bytes = 64 * 1024;
  Call& ref = *call;
  prefetches_[id] = std::move(call);
  ref.up = Upstream::start(io_, hp, loader_request(hp.host, "/prefetch", "{\"model\":\"" + model + "\",\"tier\":\"" + tier + "\"}"),
                           &ref, uo);
}

void ColdLoads::prefetched(std::uint64_t id, const std::string& what, const Status& st) {
  auto it = prefetches_.find(id);
  if (it == prefetches_.end()) return;
  if (!st.ok()) {
    counters_.prefetch_failures++;
    spdlog::warn("fan-out: prefetch {} failed: {}", what, st.message());
  }
  // Not inside the call's own callback: the loop frees it once this handler returns.
  asio::post(io_, [call = std::shared_ptr<Call>(std::move(it->second))] {});
  prefetches_.erase(it);
}

void ColdLoads::start_load(const std::string& model, const cluster::LoaderState& to, std::uint64_t bytes) {
  Model& m = *models_[model];
  HostPort hp;
  if (!parse_host_port(to.address, &hp)) return finished(model, Status(ErrorCode::kUnavailable, "loader " + to.id + " has no address"));
  counters_.started++;
  m.loader = to.id;
  own_loads_[model] = {to.id, std::chrono::steady_clock::now()};
  m.bytes = bytes;
  inflight_[to.id] += bytes;
  cluster::LoadTerms t;
  m.predicted_s = cluster::predicted_load_s(to, model, bytes, {}, &t);
  spdlog::info("loading {} ({} MiB) on {} ({:.3f} s predicted: fill {:.3f}, queue {:.3f}, start {:.3f}, stop {:.3f})", model,
               bytes >> 20, to.id, m.predicted_s, t.fill_s, t.queue_s, t.start_s, t.stop_s);
  std::string req = loader_request(hp.host, "/load", "{\"model\":\"" + model + "\",\"stream\":false}");
  m.call = std::make_unique<Call>();
  m.call->done = [this, model](const Status& st) { finished(model, st); };
  Upstream::Options uo;
  uo.max_body_bytes = 64 * 1024;
  m.call->up = Upstream::start(io_, hp, std::move(req), m.call.get(), uo);
  m.renewal = std::make_unique<asio::steady_timer>(io_);
  m.started_at = std::chrono::steady_clock::now();
  renew(model);
}

void ColdLoads::renew(const std::string& model) {
  Model& m = *models_[model];
  if (!m.renewal) return;
  m.renewal->expires_after(options_.lock_ttl / 3);
  m.renewal->async_wait([this, alive = alive_, model](const boost::system::error_code& ec) {
    if (ec || !*alive) return;
    Model& m = *models_[model];
    if (std::chrono::steady_clock::now() - m.started_at > options_.load_timeout) {
      if (m.call && m.call->up) m.call->up->abort();
      return finished(model, Status(ErrorCode::kUnavailable, "the loader did not finish within " +
                                                                  std::to_string(options_.load_timeout.count()) + " ms"));
    }
    on_redis([key = cluster::load_lock_key(model), owner = options_.owner,
              ttl = std::to_string(options_.lock_ttl.count())](cluster::RedisClient& redis) {
      (void)redis.command({"EVAL", kRenew, "1", key, owner, ttl});
    });
    renew(model);
  });
}

void ColdLoads::finished(const std::string& model, const Status& st) {
  Model& m = *models_[model];
  if (st.ok()) {
    counters_.succeeded++;
    m.last_error.clear();
    const double measured = std::chrono::duration<double>(std::chrono::steady_clock::now() - m.started_at).count();
    if (measured > 0 && m.predicted_s > 0) {  // 0: it was loading there already, joined, not predicted
      if (errors_.size() >= 1024) errors_.pop_front();
      errors_.push_back(m.predicted_s / measured - 1.0);
    }
    spdlog::info("{} loaded in {:.3f} s ({:.3f} s predicted)", model, measured, m.predicted_s);
    own_loads_[model].at = std::chrono::steady_clock::now();
  } else {
    counters_.failed++;
    own_loads_.erase(model);
    m.last_error = st.message();
    spdlog::warn("load of {} failed: {}", model, st.message());
  }
  m.renewal.reset();
  if (auto it = inflight_.find(m.loader); it != inflight_.end()) {
    it->second -= std::min(it->second, m.bytes);
    if (it->second == 0) inflight_.erase(it);
  }
  m.loader.clear();
  // Not inside the call's own callback: the loop frees it once this handler returns.
  asio::post(io_, [call = std::shared_ptr<Call>(std::move(m.call))] {});
  on_redis([key = cluster::load_lock_key(model), owner = options_.owner, ok = st.ok(),
            ttl = std::to_string(options_.lock_ttl.count())](cluster::RedisClient& redis) {
    if (ok) {
      (void)redis.command({"EVAL", kLoaded, "1", key, owner, ttl});
    } else {
      (void)redis.command({"EVAL", kRelease, "1", key, owner});
    }
  });
  // A success is seen when the model's agent beats; until then nobody loads it again.
  m.attempt.load_result(st.ok(), std::chrono::steady_clock::now(), options_.retry, options_.lock_ttl);
}

}  // namespace uma::gateway
