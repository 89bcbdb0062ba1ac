// ModelHost: the models one agent serves, each a umad of its own (agent/model_process.h) whose
// image comes from the agent's model store (store/tier_store.h), or which opens a GGUF file of the
// user's itself (umad's model router: no store), loaded on demand, kept while used and unloaded by
// keep_alive or for room (agent/residency.h).
//
// One model's states (one enum, one setter that aborts on a transition nobody wrote code for):
//   queued    waiting for room under the budget (bounded by queue_timeout)
//   filling   the store brings its bytes to an image (progress: ready bytes of bytes); a file
//             model passes through at once
//   starting  its umad maps the image and loads it (start_timeout)
//   loaded    serving at its own HTTP port; busy/idle as its umad reports
//   unloading its umad was asked to stop (SIGUSR1: only if idle) or told to (SIGTERM, forced)
// A model leaves the table when its process has exited (the reaper: SIGCHLD), and only then gives
// its room back, so the budget always counts memory that is really held. An unload that the
// child refuses (a request arrived first) leaves it loaded and busy. A load of a model that is
// unloading waits for the exit and loads it again.
//
// Threading: the I/O thread of `io` only (every public method, every callback); the store is
// thread-safe and fills on its own thread; a fill's completion is waited for on a short-lived
// thread that posts back. Ownership: the host owns its processes and their images' holds; stop()
// ends them all. Destroy it after the store has stopped (TierStore::stop: fills it waits for end)
// and before the store is destroyed. A forked child dies with the thread that forked it (PR_SET_PDEATHSIG), so the
// I/O thread must be the agent's main thread.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "agent/model_process.h"
#include "agent/residency.h"
#include "cluster/model_state.h"
#include "common/state_machine.h"
#include "common/status.h"
#include "store/tier_store.h"

namespace uma::agent {

// A load moves through queued, filling, starting, loaded and unloading (model_states()).
using cluster::ModelState;
using cluster::model_state_name;
const StateTable<ModelState, cluster::kModelStates>& model_states();
// Why a model is unloading: for room, asked (a request, keep_alive 0), its keep_alive ran out, or
// the agent is stopping (not counted as an unload).
enum class UnloadReason : std::uint8_t { kNone, kRoom, kRequest, kKeepAlive, kStop };
const char* unload_reason_name(UnloadReason r);

struct HostConfig {
  std::string umad;                    // the umad binary
  std::vector<std::string> umad_args;  // given to every umad (threads, n_ctx, sessions, ...)
  std::string run_dir;                 // umads' sockets and logs
  std::string http_host = "127.0.0.1";  // where umads serve HTTP (each on a free port)
  // --cluster: every umad also beats as an agent (`--agent-id ID/MODEL` plus these flags), so
  // gateways route to it as to any agent. Empty id: standalone.
  std::string agent_id;
  std::vector<std::string> cluster_args;
  Budget budget;                       // memory of loaded models (their bytes) and their count
  std::int64_t keep_alive_ms = 5 * 60 * 1000;  // default keep_alive (< 0: never unloaded for idleness)
  std::chrono::milliseconds queue_timeout{30000};
  std::chrono::milliseconds start_timeout{300000};
  std::chrono::milliseconds tick{50};  // progress events, keep_alive and timeouts
  // One umad kept started ahead (daemon/standby.h, its GPU contexts ready): a cold model's start
  // takes it instead of a process start and the driver's, and another is started once it serves.
  bool standby = true;
  // It pins the DRAM tier's images while it waits (runtime/host_pins.h).
  bool standby_pins = true;
};

// Where a model's bytes come from.
struct ModelOrigin {
  store::ModelSource source;  // a catalog model: through the store, verified, as an image
  std::string file;           // or a GGUF file its umad opens itself (llama.cpp's mmap)
  std::uint64_t bytes = 0;    // the file's size, or the manifest's
};

// A load's progress and its end (done: status, and where it serves).
struct LoadUpdate {
  std::string id;
  ModelState state = ModelState::kQueued;
  std::string tier;  // where its bytes came from at the load's start: dram | nvme | remote
  std::uint64_t bytes = 0;
  std::uint64_t ready_bytes = 0;
  double seconds = 0;  // since the load was asked for
  bool done = false;
  Status status;
  std::string http;  // done and ok: the model's base URL (http://host:port)
};
using LoadListener = std::function<void(const LoadUpdate&)>;

struct ModelInfo {
  std::string id;
  ModelState state = ModelState::kQueued;
  std::uint64_t bytes = 0;
  std::uint64_t ready_bytes = 0;
  bool in_use = false;
  std::int64_t loaded_at_ms = 0;  // wall clock, ms since the epoch; 0: not loaded
  std::int64_t last_used_ms = 0;
  std::int64_t keep_alive_ms = 0;
  std::string http;
  pid_t pid = 0;
};

struct HostCounters {
  std::uint64_t loads = 0;          // loads that ended serving
  std::uint64_t load_failures = 0;
  std::uint64_t unloads_keep_alive = 0;
  std::uint64_t unloads_room = 0;
  std::uint64_t unloads_request = 0;
  std::uint64_t unload_refusals = 0;  // a child busy when asked
  std::uint64_t crashes = 0;          // a loaded model's umad exited unasked
  std::uint64_t standby_starts = 0;   // loads whose umad was the standby
};

class ModelHost {
 public:
  // The catalog: where a model's bytes come from (kNotFound for an id it does not have).
  using Lookup = std::function<Status(const std::string& id, ModelOrigin* out)>;
  // `store`: null when every model is a file.
  ModelHost(boost::asio::io_context& io, HostConfig config, store::TierStore* store, Lookup lookup);
  ~ModelHost();
  ModelHost(const ModelHost&) = delete;
  ModelHost& operator=(const ModelHost&) = delete;

  void start();
  // Loads `id` (or finds it loaded); `listener` hears progress and, once, the end. keep_alive:
  // nullopt keeps the model's (or the default); a value sets it from now on.
  void load(const std::string& id, std::optional<std::int64_t> keep_alive_ms, LoadListener listener);
  // Unloads `id` once idle (force: now, ending its streams). `done(status, state)`: "unloaded"
  // once its process exited, or at once "draining" while requests are in flight or it loads.
  using UnloadDone = std::function<void(const Status&, const std::string& state)>;
  void unload(const std::string& id, bool force, UnloadDone done);
  std::vector<ModelInfo> models() const;
  const HostCounters& counters() const { return counters_; }
  bool standby_ready() const { return standby_ && standby_ready_; }
  int standby_pinned_images() const { return standby_ready() ? standby_pinned_ : 0; }
  std::uint64_t held_bytes() const;  // the budget in use
  std::uint64_t idle_bytes() const;  // of it, idle loaded models' (room a load can take)
  // Its own loads, measured, routing's L term: the fill's rate per tier the bytes came from
  // (bytes/s from the fill's start until the image is whole; EWMA, 0 until one), and a umad's start
  // (exec, or a standby's handover, to serving: llama.cpp's load, its context, the first tick): the
  // median of the last 5 starts that ran alone (the first, with a cold page cache for umad itself,
  // does not weigh on every later prediction as an average's would), kept apart for starts that
  // took the standby and those that spawned a umad: the next load's is the way it will start.
  double fill_rate(store::Tier t) const { return t == store::Tier::kNone ? 0 : fill_rate_[static_cast<int>(t)]; }
  double start_s() const;
  // An idle model's unload (asked to exit), measured: what a load that must make room waits first.
  double stop_s() const { return stop_s_; }
  const HostConfig& config() const { return config_; }
  // Ends every model (`drain`: a serving umad drains, SIGTERM; the rest stop at once, SIGINT;
  // SIGKILL after `grace`); `done` once all have exited.
  void stop(std::chrono::milliseconds grace, std::function<void()> done, bool drain = false);

 private:
  using Clock = std::chrono::steady_clock;
  struct Entry;
  void set_state(Entry& e, ModelState to);
  void pump();
  void begin_fill(Entry& e);
  void on_filled(const std::string& id, std::uint64_t generation, const Status& st);
  void begin_start(Entry& e);
  void on_status(const std::string& id, const StatusLine& line);
  void begin_unload(Entry& e, UnloadReason reason);
  void reap();
  void on_exit(Entry& e, int status);
  void finish_load(Entry& e, const Status& st);
  void progress(Entry& e);
  void tick();
  void arm_reaper();
  void spawn_standby();
  void record_start(bool took_standby, double seconds);
  void mark_overlaps(Entry& e);
  void on_standby_exit(int status);
  void sync_standby_pins();
  std::vector<Resident> residents(bool unloading_as_leaving) const;
  Entry* find(const std::string& id);
  std::int64_t wall_ms(Clock::time_point t) const;

  boost::asio::io_context& io_;
  HostConfig config_;
  store::TierStore* store_;
  Lookup lookup_;
  boost::asio::signal_set sigchld_;
  boost::asio::steady_timer timer_;
  std::map<std::string, std::unique_ptr<Entry>> entries_;
  std::deque<std::string> queue_;
  std::map<std::uint64_t, std::thread> fill_waits_;
  std::uint64_t next_generation_ = 1;
  HostCounters counters_;
  double fill_rate_[3] = {0, 0, 0};
  struct RecentStarts {
    std::array<double, 5> seconds{};
    std::size_t recorded = 0;
    double median = 0;
  };
  RecentStarts fresh_starts_, standby_starts_;
  double stop_s_ = 0;
  const Clock::time_point steady_epoch_ = Clock::now();
  const std::int64_t wall_epoch_ms_;
  bool stopping_ = false;
  std::function<void()> stopped_;
  std::unique_ptr<ModelProcess> standby_;
  bool standby_ready_ = false;
  int standby_failures_ = 0;  // standbys that exited before they were ready; 3 in a row: no more
  std::uint64_t standby_seq_ = 0;
  // The pin set last sent (agent/handover.h), to which standby, and what it answered.
  std::vector<std::weak_ptr<store::ModelImage>> standby_pin_set_;
  std::uint64_t standby_pin_set_to_ = 0;
  int standby_pinned_ = 0;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace uma::agent
