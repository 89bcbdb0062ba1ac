// LoaderBeat: uma-agent --cluster's beat thread: the latest LoaderState (cluster/loader_state.h)
// published from the agent's I/O thread is written to Redis every interval (`uma:loader:{id}` PX
// ttl, SADD `uma:loaders`), stamped with the time of the write. Redis down is not an error: it
// logs once and writes again when Redis answers. stop() deletes the key (a clean stop leaves at
// once rather than after the TTL).
// Thread-safety: publish() from any thread; start()/stop() from the owner's. The beat owns its
// RedisClient on its own thread; its wait is a condition variable, so stop() returns at once.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>

#include "cluster/loader_state.h"
#include "cluster/redis_client.h"

namespace uma::publish {

class LoaderBeat {
 public:
  LoaderBeat(cluster::RedisAddress redis, std::chrono::milliseconds interval = std::chrono::milliseconds(1000),
             std::chrono::milliseconds ttl = std::chrono::milliseconds(3000));
  ~LoaderBeat();
  void publish(cluster::LoaderState state);
  void start();
  void stop();

 private:
  void run();
  cluster::RedisAddress redis_;
  std::chrono::milliseconds interval_, ttl_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<cluster::LoaderState> latest_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace uma::publish
