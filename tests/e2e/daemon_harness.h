// Test harness: starts the real umad binary on a temporary socket and talks to it over plain
// POSIX sockets, recording when each chunk of bytes arrived.
#pragma once

#include <sys/types.h>

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace uma::test {

using TestClock = std::chrono::steady_clock;

// How long a test waits for an event before it fails: a guard against a hang, far beyond what the
// slowest stage (ThreadSanitizer on a machine whose cores are taken) needs, never a speed target.
// Tests assert behaviour, not speed: a wait ends on the event it needs, not on time passing.
inline constexpr std::chrono::seconds kHangGuard{120};
inline constexpr int kHangGuardMs = static_cast<int>(std::chrono::milliseconds(kHangGuard).count());  // for read_event

// A sanitizer build: a test that repeats one path many times for its statistics (seeds, schemas)
// runs fewer repeats there. The sanitizer checks the path, and every repeat runs in the plain build.
#ifdef UMA_TEST_SANITIZED
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif

// Polls `pred` (every few ms) until it holds: how long that took, or nullopt once `guard` passed.
std::optional<std::chrono::milliseconds> wait_for(const std::function<bool()>& pred, std::chrono::milliseconds guard = kHangGuard);
// The same as a gtest assertion: ASSERT_TRUE(eventually(pred, "both agents live")) fails with
// "timed out after 120 s waiting for both agents live".
::testing::AssertionResult eventually(const std::function<bool()>& pred, const std::string& what,
                                      std::chrono::milliseconds guard = kHangGuard);

std::string bin_path(const std::string& name);     // build/bin/<name>
std::string model_path(const std::string& name);   // build/models/<name>
// Where scripts/setup.sh unpacks Debian packages it could not install (the cache's deps-prefix).
std::string deps_prefix();
std::string temp_dir();                            // unique per process, created on first use
std::string slurp(const std::string& path);        // a whole file ("" when unreadable)

class Daemon {
 public:
  // Starts umad with --socket <tmp> plus `args` (and --threads 1 unless they say); waits until the
  // socket accepts. max_open_files > 0: the daemon runs under that RLIMIT_NOFILE. An empty `model`
  // passes no --model (the args name it: --model-id).
  explicit Daemon(std::vector<std::string> args, const std::string& model = "oracle.gguf", int max_open_files = 0);
  ~Daemon();  // SIGKILL if still running
  const std::string& socket() const { return socket_; }
  pid_t pid() const { return pid_; }
  bool started() const { return started_; }
  // SIGTERM, then waits; returns the exit status (or -1 on timeout / abnormal end).
  int stop(std::chrono::seconds timeout = kHangGuard);
  // Waits for an exit it did not ask for (after a signal the test sent itself); the same returns.
  int wait(std::chrono::seconds timeout = kHangGuard);
  long rss_kib() const;  // VmRSS from /proc
  std::string log() const;

 private:
  std::string socket_;
  std::string log_path_;
  pid_t pid_ = -1;
  bool started_ = false;
  bool json_ = false;
};

// Starts a binary with its stdout+stderr in `out_path`; its pid (the caller waits for it).
pid_t spawn_process(const std::vector<std::string>& argv, const std::string& out_path);

// Waits up to `timeout` for a spawned process to exit: its exit status, -1 if a signal ended it,
// -2 if it is still running.
int wait_exit(pid_t pid, std::chrono::milliseconds timeout);

// A spawned process's end: SIGTERM and wait up to the hang guard (SIGKILL past it); *pid becomes -1.
// Returns as wait_exit does; -1 when *pid never started or was already reaped.
int stop_process(pid_t* pid);
// SIGKILL and reap, for destructors; *pid becomes -1.
void kill_process(pid_t* pid);

// Runs a binary to completion; returns its exit status and output (stdout+stderr); -2 when it was
// still running after the hang guard (then killed).
int run_command(const std::vector<std::string>& argv, std::string* output, int timeout_sec = kHangGuard.count());

class Client {
 public:
  explicit Client(const std::string& socket_path);
  ~Client();
  bool connected() const { return fd_ >= 0; }
  bool send(const std::string& bytes);
  // Reads until a '\n'; returns the line without it, or nullopt on timeout / EOF.
  std::optional<std::string> read_line(std::chrono::milliseconds timeout = kHangGuard);
  // Reads whatever arrives within `timeout` (at least one byte unless it times out).
  std::string read_some(std::chrono::milliseconds timeout);
  bool wait_closed(std::chrono::milliseconds timeout);  // true once the server closed the socket
  void close();
  void shutdown_write();  // half-close: no more requests, replies still wanted
  // Arrival time of every chunk read so far and the total bytes after it.
  std::vector<std::pair<TestClock::time_point, size_t>> arrivals;
  size_t bytes_received = 0;

 private:
  int fd_ = -1;
  std::string pending_;
};

// Sends "/metrics" on a fresh connection and returns the JSON line (newline protocol).
std::string fetch_metrics(const std::string& socket_path);
// The same over the framed JSON protocol: the metrics event's JSON.
std::string fetch_metrics_json(const std::string& socket_path);

}  // namespace uma::test
