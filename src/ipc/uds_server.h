// UdsServer: the I/O side of umad over a Unix domain socket, for either wire protocol
// (ipc/protocol.h: framed JSON by default, newline for debugging).
//
// Threading: every method except deliver() runs on the I/O thread (the thread running the
// io_context). deliver() is the compute thread's way in: it posts the events onto the loop.
// Ownership: the server owns its connections; each in-flight async operation holds a shared_ptr
// to its connection, so a connection closed inside a callback is freed only after the last
// callback returns (never freed inside its own callback).
//
// What it adds to the shared serving layer (net/stream_server.h, which does connections, caps,
// session slots, cancelling, timers and shutdown the same way for every front end):
// - the socket file: claimed (see socket_path.h), born mode 0600, removed at shutdown;
// - its adapter (uds_server.cc) between the Protocol's typed inputs and the serving layer: at most
//   one request in flight per connection (another is an E_BUSY error; a metrics request needs a
//   connection of its own), cancel frames for the request in flight, E_TOO_MANY_SESSIONS then
//   close when every slot is taken;
// - a client's half-close (EOF without hang-up) still gets its replies; after a reply ends, the
//   connection closes unless the request asked to keep it (JSON keep_alive; newline connections
//   are always kept).
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"
#include "ipc/protocol.h"
#include "metrics/server_metrics.h"
#include "net/accept_loop.h"
#include "net/session_slots.h"
#include "net/stream_server.h"
#include "serve/io_boundary.h"

namespace uma {

struct ServerConfig {
  std::string socket_path = "/tmp/uma.sock";
  ProtocolKind protocol = ProtocolKind::kJson;
  ProtocolLimits limits;                // prompt/frame caps, default max_tokens and sampling
  std::int32_t max_sessions = 16;       // the daemon's SessionSlots (all front ends together)
  std::int32_t max_connections = 256;
  std::size_t max_tx_bytes = 1 << 20;
  std::int32_t idle_timeout_sec = 600;  // 0: never
};

class UdsServer final : public EventSink {
 public:
  UdsServer(boost::asio::io_context& io, ServerConfig config, ServerMetrics& metrics, SessionSlots& slots,
            WorkSubmit submit);
  ~UdsServer() override;

  Status listen();  // claims the path (see socket_path.h), binds with mode 0600, listens
  void start();     // accept loop and idle sweep
  // Caps from the context, for connections accepted from now on (before start()).
  void set_request_limits(std::size_t max_prompt_bytes, std::size_t max_frame_bytes);
  // Shutdown, step 1: stop accepting and starting requests. Open requests end when the compute
  // thread fails them (their error lines are then written).
  void begin_shutdown();
  // Shutdown, step 2 (after the compute thread stopped): flush and close every connection, remove
  // the socket file, then call `done` (at the latest after `deadline`).
  void finish_shutdown(std::chrono::milliseconds deadline, std::function<void()> done);

  void deliver(std::vector<Event> events) override;

 private:
  ServerConfig config_;
  StreamServer server_;
  boost::asio::local::stream_protocol::acceptor acceptor_;
  AcceptLoop<boost::asio::local::stream_protocol::acceptor> accept_loop_;
  bool listening_ = false;
};

}  // namespace uma
