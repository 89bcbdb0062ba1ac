#include "publish/agent_heartbeat.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <fstream>
#include <random>
#include <vector>
#include <cstdio>

#include "cluster/agent_state.h"

namespace uma::publish {

namespace {

std::string random_hex64() {
  std::mt19937_64 rng(std::random_device{}());
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(rng()));
  return buf;
}

// MemAvailable from /proc/meminfo, bytes; -1 where there is none (not Linux).
std::int64_t available_memory() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  std::int64_t kib = 0;
  std::string unit;
  while (f >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  return -1;
}

// A rate's EWMA: the new sample weighs 0.3 (a few beats to follow a change, one odd beat barely moves it).
double ewma(double old, double sample) { return old <= 0.0 ? sample : 0.7 * old + 0.3 * sample; }

}  // namespace

AgentHeartbeat::AgentHeartbeat(AgentConfig config, const ServerMetrics& metrics)
    : config_(std::move(config)), metrics_(metrics), boot_id_(random_hex64()) {}

AgentHeartbeat::~AgentHeartbeat() { stop(); }

void AgentHeartbeat::start() {
  rates_.at = std::chrono::steady_clock::now();
  rates_.prompt_tokens = metrics_.prompt_tokens_total.load();
  rates_.generated = metrics_.tokens_generated_total.load();
  thread_ = std::thread([this] { run(); });
}

void AgentHeartbeat::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ || !thread_.joinable()) return;
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
  cluster::RedisClient redis(config_.redis, config_.redis_timeout);
  (void)redis.pipeline({{"DEL", cluster::agent_key(config_.id)}, {"SREM", cluster::kAgentsSet, config_.id}});
}

void AgentHeartbeat::update_rates() {
  const auto now = std::chrono::steady_clock::now();
  const double secs = std::chrono::duration<double>(now - rates_.at).count();
  // Prompt tokens computed, not those served from cached KV (they cost no prefill).
  const std::uint64_t prompt = metrics_.prompt_tokens_total.load() - metrics_.prefix_reused_tokens_total.load();
  const std::uint64_t generated = metrics_.tokens_generated_total.load();
  if (secs > 0.0) {
    // Only beats that had such work count: an idle agent keeps its last measured rate.
    if (prompt > rates_.prompt_tokens) rates_.prefill_tok_s = ewma(rates_.prefill_tok_s, double(prompt - rates_.prompt_tokens) / secs);
    if (generated > rates_.generated) rates_.decode_tok_s = ewma(rates_.decode_tok_s, double(generated - rates_.generated) / secs);
  }
  rates_.at = now;
  rates_.prompt_tokens = prompt;
  rates_.generated = generated;
}

std::string AgentHeartbeat::state_json(std::chrono::system_clock::time_point now) {
  cluster::AgentState a;
  a.id = config_.id;
  a.address = config_.address;
  a.boot_id = boot_id_;
  a.events = config_.events;
  a.ts_ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count();
  a.models = {cluster::AgentModel{config_.model_name, config_.model_bytes, cluster::ModelState::kLoaded, store::Tier::kDram}};
  if (config_.store_view) config_.store_view(a);
  // The prefill rate the scheduler's cost model fitted (what a prompt costs while the agent works,
  // contention included); before it has one, the rate seen over the beats.
  const double ms_per_token = metrics_.prefill_ms_per_token.load();
  a.prefill_tok_s = ms_per_token > 0.0 ? 1000.0 / ms_per_token : rates_.prefill_tok_s;
  a.tick_fixed_ms = metrics_.prefill_fixed_ms.load();
  a.decode_tick_ms = metrics_.decode_step_ms.load();
  a.tick_tokens = metrics_.tick_budget.load();
  a.decode_tok_s = rates_.decode_tok_s;
  a.max_sessions = config_.max_sessions;
  a.active_sessions = metrics_.active_sessions.load();
  a.queued_sessions = metrics_.queued_sessions.load();
  a.prefill_backlog_tokens = metrics_.prefill_backlog_tokens.load();
  a.kv_cells_used = metrics_.kv_tokens_used.load();
  a.kv_cells_total = metrics_.kv_cells_total.load();
  a.free_memory_bytes = available_memory();
  return cluster::encode_agent_state(a);
}

void AgentHeartbeat::run() {
  cluster::RedisClient redis(config_.redis, config_.redis_timeout);
  bool was_up = true;
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    lock.unlock();
    update_rates();
    const std::vector<std::vector<std::string>> beat = {
        {"SET", cluster::agent_key(config_.id), state_json(std::chrono::system_clock::now()), "PX", std::to_string(config_.ttl.count())},
        {"SADD", cluster::kAgentsSet, config_.id}};
    const bool had_connection = redis.connected();
    Status st = redis.pipeline(beat);
    // A connection that broke since the last beat (Redis restarted) fails the first write: dial
    // again at once rather than a whole interval later (both commands are idempotent).
    if (!st.ok() && had_connection) st = redis.pipeline(beat);
    if (!st.ok() && was_up) spdlog::warn("agent {}: cannot reach redis, serving on: {}", config_.id, st.message());
    if (st.ok() && !was_up) spdlog::info("agent {}: registered with redis again", config_.id);
    if (st.ok() && was_up && redis.connected()) spdlog::debug("agent {}: beat", config_.id);
    was_up = st.ok();
    lock.lock();
    cv_.wait_for(lock, config_.interval, [this] { return stopping_; });
  }
}

}  // namespace uma::publish
