// AgentHeartbeat: umad's `--agent` thread. Every interval it writes this agent's soft state to
// Redis as one key, `uma:agent:{id}` (a JSON object, PX ttl: it vanishes ~3 s after the agent
// stops writing it), and adds the id to the set `uma:agents` (gateways read the set, then the
// keys; an id whose key is gone is a dead agent). Redis down is not an error for umad: the thread
// logs once, keeps serving, and writes again as soon as Redis answers (the state is rebuilt every
// beat, so a restarted, empty Redis is whole again within one interval).
//
// What a beat holds: address (the agent's HTTP base URL), boot id (random per process start: a
// restarted agent is a new one), timestamp, the model (file name, bytes, state "loaded", tier
// "dram"), the load (active and queued sessions, KV cells used / total), measured rates (prefill
// and decode tok/s, EWMA over the beats in which there was such work), and the host's available
// memory. Reads only ServerMetrics atomics: never the model, never the compute thread.
//
// Thread-safety: start()/stop() from one thread (main); the beat runs on its own thread and owns
// its RedisClient. Clock: the wait between beats is a condition variable with a timeout, so stop()
// returns at once.
#pragma once

#include <chrono>
#include <functional>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

#include "cluster/agent_state.h"
#include "cluster/redis_client.h"
#include "metrics/server_metrics.h"

namespace uma::publish {

struct AgentConfig {
  std::string id;           // unique in the cluster (default: host:port of the HTTP front end)
  std::string address;      // the base URL gateways send requests to (http://host:port)
  std::string events;       // host:port of the KV-event stream
  cluster::RedisAddress redis;
  std::string model_name;   // the model file's name
  std::int64_t model_bytes = 0;
  std::int64_t max_sessions = 0;  // the daemon's --max-sessions (gateways queue rather than overfill it)
  // Called on the heartbeat's thread each beat to add the model store's view (its model's tier,
  // the tiers' measured rates, the loader's queue); must be thread-safe. Empty: a file model.
  std::function<void(cluster::AgentState&)> store_view;
  std::chrono::milliseconds interval{1000};
  std::chrono::milliseconds ttl{3000};
  std::chrono::milliseconds redis_timeout{200};
};

class AgentHeartbeat {
 public:
  AgentHeartbeat(AgentConfig config, const ServerMetrics& metrics);
  ~AgentHeartbeat();  // stops
  void start();
  // Stops beating and deletes this agent's key (best effort: a clean shutdown leaves at once
  // rather than after the TTL).
  void stop();
  const std::string& boot_id() const { return boot_id_; }
  // The JSON a beat writes now (also for tests).
  std::string state_json(std::chrono::system_clock::time_point now);

 private:
  void run();
  struct Rates {  // EWMA of the rates seen in beats that had work
    std::uint64_t prompt_tokens = 0, generated = 0;
    std::chrono::steady_clock::time_point at{};
    double prefill_tok_s = 0.0, decode_tok_s = 0.0;
  };
  void update_rates();

  AgentConfig config_;
  const ServerMetrics& metrics_;
  std::string boot_id_;
  Rates rates_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace uma::publish
