// Blocking sockets with deadlines for uma-soak, and readers on top of them: framed JSON events
// (ipc/frame_codec + ipc/json_messages, as UmaClient uses them) and HTTP/1.1 responses with SSE
// (httpkit's ResponseReader and SseSplitter, as every HTTP client here reads them). Unlike UmaClient, every read
// says which of data, end of stream, timeout or socket error it met: the soak tells an expected
// close from a reset or a stall. Reads can be paced (small reads with a pause between them): the
// slow reader under test.
//
// Thread-safety: none; each object belongs to one client thread. Ownership: Socket owns its fd
// (closed in the destructor); a reader borrows its Socket, which must outlive it.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <random>
#include <string>
#include <string_view>

#include "httpkit/http_wire.h"
#include "ipc/frame_codec.h"
#include "ipc/json_messages.h"
#include "tools/soak/soak.h"

namespace uma::soak {

// kStopped: a paced (slow) read gave up because the run is over.
enum class Read : std::uint8_t { kData, kEof, kTimeout, kError, kStopped };

// What a read ended with, for messages.
inline const char* describe(Read r) {
  switch (r) {
    case Read::kData: return "data";
    case Read::kEof: return "end of stream";
    case Read::kTimeout: return "timeout";
    case Read::kError: return "socket error";
    case Read::kStopped: return "stopped (end of run)";
  }
  return "?";
}

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

class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  Socket(Socket&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Socket& operator=(Socket&& o) noexcept;
  ~Socket() { close(); }

  // rcvbuf > 0: SO_RCVBUF set before connecting (TCP only; a Unix socket's backlog is the
  // sender's). Invalid Socket with *error set on failure.
  static Socket unix_stream(const std::string& path, std::string* error);
  static Socket tcp(const std::string& host, int port, int rcvbuf, std::string* error);

  bool valid() const { return fd_ >= 0; }
  bool send_all(std::string_view bytes, Clock::time_point deadline, std::string* error);
  // Up to `max` bytes; kData with *n > 0, kEof, kTimeout, or kError with *error.
  Read read_some(char* buf, std::size_t max, Clock::time_point deadline, std::size_t* n, std::string* error);
  // Waits for the peer's end of stream, discarding bytes: kEof, kTimeout or kError.
  Read wait_eof(Clock::time_point deadline, std::string* error);
  void shutdown_write();
  void close_with_reset();  // SO_LINGER 0: the peer sees a reset, not an end of stream
  void close();

 private:
  int fd_ = -1;
};

// Framed JSON events from a Unix socket.
class EventReader {
 public:
  EventReader(Socket& s, std::size_t max_frame_bytes, Pacing pacing = {})
      : s_(s), rx_(max_frame_bytes), pacer_(pacing) {}
  // kData with *ev; kEof / kTimeout / kError (a frame that does not parse is kError).
  Read next(WireEvent* ev, Clock::time_point deadline, std::string* error);

 private:
  Socket& s_;
  FrameDecoder rx_;
  Pacer pacer_;
};

// One HTTP response from a TCP socket; reset() for a keep-alive connection's next response.
class HttpReader {
 public:
  HttpReader(Socket& s, Pacing pacing = {}) : s_(s), pacer_(pacing) {}
  // Reads until the header is in (kData), or kEof / kTimeout / kError (a parse error).
  Read header(Clock::time_point deadline, std::string* error);
  unsigned status() const { return rx_.status(); }
  std::string header_value(std::string_view field) const { return std::string(rx_.header(field)); }
  bool keep_alive() const { return rx_.keep_alive(); }
  // Reads the whole body (kData), or kEof / kTimeout / kError.
  Read body(std::string* out, Clock::time_point deadline, std::string* error);
  // Server-sent events: the next `data:` payload (kData), kEof at the end of the message (the
  // stream ended properly) or when the connection closed before it (see ended()).
  Read next_data(std::string* data, Clock::time_point deadline, std::string* error);
  bool ended() const { return rx_.done(); }
  void reset();  // the next response on this connection

 private:
  Read pump(Clock::time_point deadline, std::string* error);  // one read into the reader
  bool take(std::string* error, bool* progress);  // parses what is buffered

  Socket& s_;
  Pacer pacer_;
  ResponseReader rx_;
  std::string body_;  // body bytes not yet taken by body()
  SseSplitter sse_;
  bool eof_ = false;
};

}  // namespace uma::soak
