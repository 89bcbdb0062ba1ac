// BlockingSocket: a client's stream socket (Unix or TCP) with a deadline on every call, for the
// tools and tests that talk to our servers one request at a time (uma-bench, uma-soak, the e2e
// tests); the servers and the gateway use net/connection.h instead. Every read says which of
// data, end of stream, timeout or socket error it met, so a caller tells an expected close from a
// reset or a stall. Reads may be paced (small reads with pauses: a slow reader, on purpose).
//
// Thread-safety: none; one object per thread. Ownership: the socket owns its fd (closed in the
// destructor; movable, not copyable).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

namespace uma {

using BlockingClock = std::chrono::steady_clock;

// kStopped: a paced read gave up because its caller's run is over (Pacing::stop).
enum class Read : std::uint8_t { kData, kEof, kTimeout, kError, kStopped };
const char* describe(Read r);  // for messages

// How a reader takes its bytes. Default: as fast as they come. A trickling reader takes small
// chunks with a pause between reads; a stalling one takes its first few bytes, then stops
// reading for a while (the stall), then goes on.
struct Pacing {
  std::size_t chunk = 65536;                // bytes per read
  std::chrono::milliseconds pause{0};       // between reads
  std::size_t stall_after = 0;              // with stall > 0: once this many bytes are in...
  std::chrono::milliseconds stall{0};       // ...stop reading this long, once
  const std::atomic<bool>* stop = nullptr;  // set: a paced read returns kStopped
};

// A reader's pacing state. before_read() waits as the Pacing says and returns false when the
// run is over (a long stall is cut short then).
class Pacer {
 public:
  explicit Pacer(Pacing p) : p_(p) {}
  bool before_read();
  void after_read(std::size_t n) { bytes_ += n; }
  std::size_t chunk() const { return p_.chunk; }

 private:
  Pacing p_;
  bool first_ = true;
  bool stalled_ = false;
  std::size_t bytes_ = 0;
};

class BlockingSocket {
 public:
  using Clock = BlockingClock;
  BlockingSocket() = default;
  explicit BlockingSocket(int fd) : fd_(fd) {}
  BlockingSocket(BlockingSocket&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  BlockingSocket& operator=(BlockingSocket&& o) noexcept;
  ~BlockingSocket() { close(); }

  // Invalid with *error set on failure. TCP: no Nagle delay; rcvbuf > 0 sets SO_RCVBUF before
  // connecting (a Unix socket's backlog is the sender's).
  static BlockingSocket unix_stream(const std::string& path, std::string* error);
  static BlockingSocket tcp(const std::string& host, int port, int rcvbuf, std::string* error);

  bool valid() const { return fd_ >= 0; }
  bool send_all(std::string_view bytes, Clock::time_point deadline, std::string* error);
  // Up to `max` bytes: kData with *n > 0, kEof, kTimeout, or kError with *error.
  Read read_some(char* buf, std::size_t max, Clock::time_point deadline, std::size_t* n, std::string* error);
  // Waits for the peer's end of stream, discarding bytes: kEof, kTimeout or kError.
  Read wait_eof(Clock::time_point deadline, std::string* error);
  void shutdown_write();
  void close_with_reset();  // SO_LINGER 0: the peer sees a reset, not an end of stream
  void close();

 private:
  int fd_ = -1;
};

}  // namespace uma
