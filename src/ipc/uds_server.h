// UdsServer: umad's Unix-socket listener, for either wire protocol (ipc/protocol.h: framed JSON by
// default, newline for debugging), on the daemon's one server (net/stream_server.h, which does
// connections, caps, session slots, cancelling, timers and shutdown the same way for every front
// end, and takes the compute thread's events).
//
// Threading: the I/O thread (the thread running the io_context). Ownership: the daemon's server
// owns the connections; this listener owns its socket file and adapters' configuration, and must
// outlive the server's connections (they read it).
//
// What it adds to the serving layer:
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

class UdsServer final {
 public:
  UdsServer(boost::asio::io_context& io, ServerConfig config, ServerMetrics& metrics, StreamServer& serving);
  ~UdsServer();

  // Claims the path (see socket_path.h), binds with mode 0600, listens; or, socket-activated
  // (systemd's LISTEN_FDS), takes the service manager's socket for the path and leaves its file be.
  Status listen();
  bool activated() const { return activated_; }
  void start();     // the accept loop
  // Caps from the context, for connections accepted from now on (before start()).
  void set_request_limits(std::size_t max_prompt_bytes, std::size_t max_frame_bytes);
  // Shutdown: stop accepting (the server stops starting requests, see StreamServer); the socket
  // file goes once its connections have (remove_socket_file, or the destructor).
  void stop_accepting();
  void remove_socket_file();

 private:
  ServerConfig config_;
  boost::asio::local::stream_protocol::acceptor acceptor_;
  AcceptLoop<boost::asio::local::stream_protocol::acceptor> accept_loop_;
  bool listening_ = false;  // the socket file is ours to remove
  bool activated_ = false;
};

}  // namespace uma
