// UdsServer: the I/O side of umad over a Unix domain socket, for either wire protocol
// (ipc/protocol.h: framed JSON by default, newline for debugging).
//
// Threading: every method except deliver() runs on the I/O thread (the thread running the
// io_context). deliver() is the compute thread's way in: it posts the events onto the loop.
// Ownership: the server owns its connections; each in-flight async operation holds a shared_ptr
// to its connection, so a connection closed inside a callback is freed only after the last
// callback returns (never freed inside its own callback).
//
// Per connection (states: idle -> busy -> idle ... -> closing -> closed):
// - reads are always armed (so a disconnect is seen at once) unless parsed-but-unserved input
//   exceeds the cap; writes are armed only while TX bytes are pending;
// - at most max_connections are open (more are closed as they arrive, counted); accepting pauses
//   and backs off when descriptors run out (net/accept_loop.h) and never ends while serving;
// - whatever a handler throws ends that connection with E_INTERNAL, never the daemon;
// - unsent TX bytes (queued and in flight, net/tx_queue.h) are capped (max_tx_bytes): a reader too
//   slow to keep up is dropped and counted;
// - a request takes one of the daemon's session slots (net/session_slots.h, shared with HTTP) and
//   gives it back with its last event (a request whose client left is cancelled and keeps its
//   slot until the scheduler has ended it, as on HTTP): an idle keep-alive
//   connection holds none; a metrics request needs no slot;
// - after a reply ends, the connection closes unless the request asked to keep it (JSON
//   keep_alive; newline connections are always kept).
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/steady_timer.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "ipc/protocol.h"
#include "metrics/server_metrics.h"
#include "net/accept_loop.h"
#include "net/connection_table.h"
#include "net/session_slots.h"
#include "sched/io_boundary.h"
#include "sched/request.h"

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
  // Shutdown, step 1: stop accepting and starting requests. Open requests end when the compute
  // thread fails them (their error lines are then written).
  void begin_shutdown();
  // Shutdown, step 2 (after the compute thread stopped): flush and close every connection, remove
  // the socket file, then call `done` (at the latest after `deadline`).
  void finish_shutdown(std::chrono::milliseconds deadline, std::function<void()> done);

  void deliver(std::vector<Event> events) override;

 private:
  struct Conn;
  using ConnPtr = std::shared_ptr<Conn>;

  void on_accept(boost::asio::local::stream_protocol::socket socket);
  // The exception boundary: whatever escapes `f` becomes an E_INTERNAL error to that connection's
  // client, which is then closed (its request cancelled); `internal` is counted; the server
  // serves on.
  template <typename F>
  void guarded(const ConnPtr& c, F&& f);
  void fail_internal(const ConnPtr& c, const char* what);
  void on_event(const ConnPtr& c, Event& ev, std::string& out);
  void arm_read(const ConnPtr& c);
  void on_read(const ConnPtr& c, const boost::system::error_code& ec, std::size_t n);
  void serve_input(const ConnPtr& c);
  void handle(const ConnPtr& c, InputAction& action);
  void start_request(const ConnPtr& c, StartInput input);
  void send(const ConnPtr& c, std::string_view bytes);
  void send_error(const ConnPtr& c, const Status& error, const std::string& client_id);
  void arm_write(const ConnPtr& c);
  void finish_reply(const ConnPtr& c);
  void release_slot(const ConnPtr& c);  // the request in flight, if it held a slot, gives it back
  void close_when_flushed(const ConnPtr& c);
  void close(const ConnPtr& c, const char* why);
  void on_events(std::vector<Event>& events);
  void sweep_idle();
  void maybe_done();

  boost::asio::io_context& io_;
  ServerConfig config_;
  ServerMetrics& metrics_;
  SessionSlots& slots_;
  WorkSubmit submit_;
  ConnectionTable<Conn> table_;  // open connections, request ids and the request -> connection map
  boost::asio::local::stream_protocol::acceptor acceptor_;
  AcceptLoop<boost::asio::local::stream_protocol::acceptor> accept_loop_;
  boost::asio::steady_timer sweep_timer_;
  boost::asio::steady_timer shutdown_timer_;
  bool listening_ = false;
  bool shutting_down_ = false;
  std::function<void()> on_all_closed_;
};

}  // namespace uma
