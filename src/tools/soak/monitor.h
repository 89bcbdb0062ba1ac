// Watching the daemon under soak: its resident memory and open descriptors from /proc/PID, and
// its own gauges from the metrics snapshot ({"type":"metrics"} over the Unix socket, UmaClient).
// Monitor samples both every `interval` on a thread of its own.
//
// Thread-safety: read_proc and fetch_metrics are free functions with no shared state. Monitor's
// methods may be called from any thread (samples are kept under a mutex); start() once, stop()
// once. Ownership: Monitor owns its thread, joined by stop() or the destructor.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tools/soak/soak.h"

namespace uma::soak {

struct ProcSample {
  bool alive = false;
  std::int64_t rss_kb = 0;  // VmRSS
  std::int64_t fds = 0;     // entries of /proc/PID/fd
};
ProcSample read_proc(int pid);

struct MetricsSample {
  bool ok = false;
  std::string error;
  std::int64_t kv_tokens_used = 0, kv_sequences_used = 0, kv_cells_granted = 0, kv_cells_total = 0;
  std::int64_t active_sessions = 0, queued_sessions = 0, sessions_open = 0, connections_open = 0;
  std::int64_t tokens_generated_total = 0, requests_total = 0, tx_drops_total = 0, disconnects_mid_stream_total = 0;
  std::int64_t requests_cancelled_total = 0, kv_exhausted_total = 0;
  std::int64_t prefix_kept_sequences = 0, prefix_kept_cells = 0, prefix_host_snapshots = 0, prefix_host_bytes = 0;
  std::map<std::string, std::int64_t> errors;  // errors_total by kind
};
// One metrics request on a fresh connection; waits for the server to close it, so the daemon's
// descriptor for it is gone when this returns ok.
MetricsSample fetch_metrics(const std::string& socket_path, std::chrono::milliseconds timeout);

struct Sample {
  double t_s = 0;  // since Monitor::start
  ProcSample proc;
  MetricsSample metrics;
};

class Monitor {
 public:
  Monitor(int pid, std::string socket_path, std::chrono::milliseconds interval)
      : pid_(pid), socket_path_(std::move(socket_path)), interval_(interval) {}
  ~Monitor() { stop(); }
  void start();
  void stop();
  std::vector<Sample> samples() const;
  bool daemon_gone() const;
  Clock::time_point started_at() const { return start_; }

 private:
  void run();

  const int pid_;
  const std::string socket_path_;
  const std::chrono::milliseconds interval_;
  Clock::time_point start_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool gone_ = false;
  std::vector<Sample> samples_;
  std::thread thread_;
};

}  // namespace uma::soak
