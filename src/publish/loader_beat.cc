#include "publish/loader_beat.h"

#include <spdlog/spdlog.h>

namespace uma::publish {

LoaderBeat::LoaderBeat(cluster::RedisAddress redis, std::chrono::milliseconds interval, std::chrono::milliseconds ttl)
    : redis_(std::move(redis)), interval_(interval), ttl_(ttl) {}

LoaderBeat::~LoaderBeat() { stop(); }

void LoaderBeat::publish(cluster::LoaderState state) {
  {
    std::lock_guard lock(mu_);
    const bool first = !latest_;
    latest_ = std::move(state);
    if (!first) return;
  }
  cv_.notify_all();  // the first state is written at once
}

void LoaderBeat::start() { thread_ = std::thread([this] { run(); }); }

void LoaderBeat::stop() {
  if (!thread_.joinable()) return;
  std::string id;
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    if (latest_) id = latest_->id;
  }
  cv_.notify_all();
  thread_.join();
  if (id.empty()) return;
  cluster::RedisClient redis(redis_, std::chrono::milliseconds(200));
  (void)redis.pipeline({{"DEL", cluster::loader_key(id)}, {"SREM", cluster::kLoadersSet, id}});
}

void LoaderBeat::run() {
  cluster::RedisClient redis(redis_, std::chrono::milliseconds(200));
  bool was_up = true;
  std::unique_lock lock(mu_);
  while (!stopping_) {
    cv_.wait_for(lock, interval_, [this] { return stopping_ || latest_.has_value(); });
    if (stopping_) return;
    if (!latest_) continue;
    cluster::LoaderState s = *latest_;
    lock.unlock();
    s.ts_ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
    const std::vector<std::vector<std::string>> beat = {
        {"SET", cluster::loader_key(s.id), cluster::encode_loader_state(s), "PX", std::to_string(ttl_.count())}, {"SADD", cluster::kLoadersSet, s.id}};
    const bool had_connection = redis.connected();
    Status st = redis.pipeline(beat);
    if (!st.ok() && had_connection) st = redis.pipeline(beat);  // Redis restarted: dial again now
    if (!st.ok() && was_up) spdlog::warn("loader {}: cannot reach redis: {}", s.id, st.message());
    if (st.ok() && !was_up) spdlog::info("loader {}: registered with redis again", s.id);
    was_up = st.ok();
    lock.lock();
    cv_.wait_for(lock, interval_, [this] { return stopping_; });
  }
}

}  // namespace uma::publish
