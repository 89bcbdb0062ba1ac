// ColdLoads: a gateway's loads of models that no agent serves (docs/CLUSTER.md "Loads on
// demand"). Whatever number of gateways and requests ask, one load of a model runs at a time in
// the whole cluster: the gateway that takes the model's Redis lock (`SET uma:load-lock:{model}
// OWNER NX PX ttl`, renewed every ttl/3 while the load runs; when it ends, deleted if it failed,
// else kept one more ttl marked done, so gateways whose views lag do not load it again) chooses the loader with the lowest predicted load time (cluster/loader_state.h) and POSTs
// `/load` to it with the cluster's key; every other gateway's requests wait for the model to
// appear among the agents, and try the lock again only once it has lapsed (a gateway that died
// mid-load leaves a lock that expires within ttl).
//
// Threading: ensure() and the results run on the gateway's I/O thread; Redis is spoken on a thread
// of its own (its own RedisClient, every call with a deadline), which posts back. Ownership: the
// gateway owns it; the destructor stops the thread and aborts loads in flight (their locks lapse).
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cluster/loader_state.h"
#include "cluster/redis_client.h"
#include "common/status.h"
#include "gateway/dispatch_policy.h"

namespace uma::gateway {

// Where a model no agent serves is loaded: the lowest predicted load time (the default), or, as
// baselines for the benchmark (bench/serverless.sh), the loaders in turn or one at random (each
// among those with room).
enum class LoadPolicy : std::uint8_t { kPredicted, kRoundRobin, kRandom };

struct ColdLoadOptions {
  LoadPolicy policy = LoadPolicy::kPredicted;
  std::string owner;                        // this gateway in the lock's value
  std::string api_key;                      // sent to loaders (Authorization: Bearer)
  std::chrono::milliseconds lock_ttl{10000};
  std::chrono::milliseconds retry{500};     // a lock held elsewhere is tried again after this
  std::chrono::milliseconds load_timeout{300000};
  bool live_migration = true;  // make room by moving streams of models served elsewhere too
};

struct ColdLoadCounters {
  std::uint64_t started = 0;    // loads this gateway asked a loader for
  std::uint64_t succeeded = 0;
  std::uint64_t failed = 0;
  std::uint64_t lock_busy = 0;  // another gateway held the lock
  std::uint64_t migrations = 0;         // times this gateway moved streams for a load (live migration)
  std::uint64_t prefetches = 0;         // prefetches asked of loaders (gateway/fan_out.h)
  std::uint64_t prefetch_failures = 0;  // refused, or the loader could not be reached
};

class ColdLoads {
 public:
  ColdLoads(boost::asio::io_context& io, cluster::RedisAddress redis, ColdLoadOptions options);
  ~ColdLoads();
  ColdLoads(const ColdLoads&) = delete;
  ColdLoads& operator=(const ColdLoads&) = delete;

  // Live migration (cluster::choose_migration): whether another agent serves a model that a loader
  // has in use, and moving this gateway's streams of models off a loader (the gateway's proxies
  // resume them elsewhere). Set by the gateway; unset: no migration.
  using ServedElsewhere = std::function<bool(const std::string& model, const std::string& loader)>;
  // MoveStreams answers how many of this gateway's streams it moved.
  using MoveStreams = std::function<std::size_t(const std::string& loader, const std::vector<std::string>& models)>;
  void set_migration(ServedElsewhere served_elsewhere, MoveStreams move_streams) {
    served_elsewhere_ = std::move(served_elsewhere);
    move_streams_ = std::move(move_streams);
  }
  // A request waits for `model`: see that someone loads it (`loaders`: the gateway's latest view).
  void ensure(const std::string& model, const std::vector<cluster::LoaderState>& loaders);
  // Each load that `loaders` (this gateway's latest view) shows queued at a loader behind models in
  // use: this gateway's streams of them move off it. Whichever gateway chose it: one chosen on a
  // view a beat older than a stream that came since, or one whose room another gateway's streams
  // hold (the choosing gateway moved only its own).
  void make_room_for_queued(const std::vector<cluster::LoaderState>& loaders);
  // `loaders` as this gateway knows them: each with the models this gateway had loaded there within
  // a lock time added (loaders' beats lag their loads by about a second).
  std::vector<cluster::LoaderState> with_own_loads(std::vector<cluster::LoaderState> loaders) const;
  // Asks loader `to` to bring `model` to its `tier` (nvme | dram) ahead of a load (fan-out).
  void prefetch(const std::string& model, const cluster::LoaderState& to, const std::string& tier);
  // Why the last load of `model` failed here ("" when none did), for the requests that give up.
  std::string last_error(const std::string& model) const;
  const ColdLoadCounters& counters() const { return counters_; }
  // predicted / measured - 1 of this gateway's successful loads (the L term's error), the last 1024.
  const std::deque<double>& prediction_errors() const { return errors_; }

 private:
  struct Model;
  struct Call;
  std::string loader_request(const std::string& host, const std::string& path, const std::string& body) const;
  using Task = std::function<void(cluster::RedisClient&)>;
  void on_redis(Task task);  // runs `task` on the Redis thread
  void locked(const std::string& model, bool acquired, std::uint64_t bytes, const Status& st);
  void start_load(const std::string& model, const cluster::LoaderState& to, std::uint64_t bytes);
  // Moves this gateway's streams of `models` off `loader` for `model`'s load (counted where any did).
  void migrate(const std::string& loader, const std::string& model, const std::vector<std::string>& models);
  void finished(const std::string& model, const Status& st);
  void prefetched(std::uint64_t id, const std::string& what, const Status& st);
  void renew(const std::string& model);
  void run();

  boost::asio::io_context& io_;
  cluster::RedisAddress redis_;
  ColdLoadOptions options_;
  std::map<std::string, std::unique_ptr<Model>> models_;
  ServedElsewhere served_elsewhere_;
  MoveStreams move_streams_;
  std::map<std::uint64_t, std::unique_ptr<Call>> prefetches_;
  struct OwnLoad {
    std::string loader;
    std::chrono::steady_clock::time_point at;
  };
  std::map<std::string, OwnLoad> own_loads_;  // model -> where this gateway last loaded it
  std::uint64_t next_prefetch_ = 1;
  ColdLoadCounters counters_;
  std::deque<double> errors_;
  std::uint64_t cursor_ = 0;  // round-robin
  // Bytes of the loads this gateway has running on each loader (by id): its beat may not show
  // them yet, and without them loads asked for together all went to the same loader.
  std::map<std::string, std::uint64_t> inflight_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> tasks_;
  bool stopping_ = false;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
  std::thread thread_;
};

}  // namespace uma::gateway
