// UmaClient: a small blocking client of umad's framed JSON protocol, for uma-cli, the tests and
// the benchmark. Speaks only the wire format (ipc/json_messages.h); knows nothing of the daemon.
// Not thread-safe, except cancel_from_any_thread(), which only writes one cancel frame.
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "common/status.h"
#include "ipc/frame_codec.h"
#include "ipc/json_messages.h"

namespace uma {

class UmaClient {
 public:
  // Connects to the daemon's socket; nullptr with *status set on failure.
  static std::unique_ptr<UmaClient> connect(const std::string& socket_path, Status* status);
  ~UmaClient();

  Status send_request(const WireRequest& request);
  Status send_cancel(const std::string& id);
  Status send_metrics_request(bool prometheus = false);
  Status send_raw(std::string_view bytes);  // already framed bytes (tests)
  // Waits for the next event; timeout_ms < 0 waits forever. kIo on EOF, error or timeout.
  Status read_event(WireEvent* event, int timeout_ms = -1);
  int fd() const { return fd_; }

 private:
  explicit UmaClient(int fd) : fd_(fd) {}
  Status write_all(std::string_view bytes);

  int fd_ = -1;
  std::mutex write_mu_;        // guards writes: a cancel may come from a signal-watching thread
  FrameDecoder rx_{64u << 20};
};

}  // namespace uma
