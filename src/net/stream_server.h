// StreamServer: the daemon's one server, on net/connection.h, for every front end (the Unix
// socket, HTTP): each listener keeps its own listening socket (a path, a TCP port), hands each
// accepted socket to adopt() under its front end, and supplies that front end's ProtocolAdapter per
// connection (net/protocol_adapter.h); everything else is here, once:
// - at most max_connections open per front end (more are closed as they arrive and counted);
// - input served in order: the adapter parses, the server starts, cancels or answers; what the
//   adapter defers (a large body) is parsed on the offload pool while the connection waits in
//   "preparing" (its reads stay armed, so a client that leaves is still seen);
// - a request takes one of the daemon's session slots (net/session_slots.h, shared by all front
//   ends) from its start until its last event; an idle keep-alive connection holds none; a request
//   whose client left is cancelled and keeps its slot until the scheduler has ended it;
// - a request that finds every slot taken waits for one (llama-server's queue past its slots),
//   first come first served across front ends, at most SlotQueue::max_waiting of them and each
//   at most max_wait; past either it is refused (E_TOO_MANY_SESSIONS: 429 on HTTP). A waiting
//   request has sent nothing yet; its client leaving or cancelling takes it out of the line;
// - request ids from one ConnectionTable, and events routed back by them (the compute thread's
//   EventSink is this server);
// - close-with-cancel in one place (on_close), the idle timer (a connection idle and flushed for
//   its front end's idle_timeout_sec closes; for HTTP that is also the time a whole request has
//   to arrive);
// - the exception boundary: what a handler throws ends that connection with the adapter's
//   internal-error answer (its request cancelled), counted as E_INTERNAL; the server serves on;
// - shutdown in two steps (begin_shutdown / finish_shutdown).
// A request's choices (OpenAI's `n`) are run as serve/choices.h says.
//
// Threading: every method except deliver() runs on the I/O thread; deliver() is the compute
// thread's way in and posts onto the loop. Ownership: the server owns its connections (through
// the table; async operations hold their own references, net/connection.h).
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "metrics/server_metrics.h"
#include "net/connection.h"
#include "net/connection_table.h"
#include "net/protocol_adapter.h"
#include "net/session_slots.h"
#include "serve/io_boundary.h"

namespace uma {

// One front end's connections: what differs between listeners.
struct FrontEndConfig {
  FrontEnd front_end = FrontEnd::kUnixSocket;
  const char* log_name = "conn";
  std::int32_t max_connections = 256;
  std::size_t max_tx_bytes = 1 << 20;
  std::int32_t idle_timeout_sec = 600;  // 0: never
  bool eof_closes = false;              // see ConnectionOptions
  // This front end's entries of the labelled metrics.
  std::atomic<std::int64_t>* connections_open = nullptr;
  std::atomic<std::uint64_t>* connections_rejected_total = nullptr;
};

// A front end's configuration with what follows from which front end it is: its entries of the
// labelled metrics, its log name, and EOF (a half-close on the Unix socket; a client gone on HTTP).
FrontEndConfig front_end_config(FrontEnd front_end, std::int32_t max_connections, std::size_t max_tx_bytes,
                                std::int32_t idle_timeout_sec, ServerMetrics& metrics);

// Requests waiting for a session slot (the daemon's --max-queue and --max-queue-ms).
struct SlotQueue {
  std::int32_t max_waiting = 64;
  std::chrono::milliseconds max_wait{30000};
};

class StreamServer final : public EventSink, private ConnectionOwner {
 public:
  using AdapterFactory = std::function<std::unique_ptr<ProtocolAdapter>()>;
  // Runs a job on another thread and returns true, or returns false (the job then runs here).
  // The jobs it accepted must have run, or been dropped unrun, before the server is destroyed.
  using Offload = std::function<bool(std::function<void()>)>;

  StreamServer(boost::asio::io_context& io, ServerMetrics& metrics, SessionSlots& slots, WorkSubmit submit,
               Offload offload = nullptr);
  ~StreamServer() override;

  // A front end its listener adopts sockets under (before any is adopted).
  void add_front_end(FrontEndConfig config, AdapterFactory make_adapter);
  void set_slot_queue(SlotQueue q) { slot_queue_ = q; }
  void start();  // the idle timer
  // An accepted socket of front end `f`: served, or closed when that front end is at its cap.
  void adopt(FrontEnd f, StreamSocket socket);
  bool shutting_down() const { return shutting_down_; }
  // Shutdown, step 1: no new connections or requests; idle connections close. Requests in flight
  // end when the compute thread fails them (their answers are written), then their connections
  // close.
  void begin_shutdown();
  // Shutdown, step 2 (after the compute thread stopped): flush and close every connection, then
  // call `done` (at the latest after `deadline`).
  void finish_shutdown(std::chrono::milliseconds deadline, std::function<void()> done);

  void deliver(std::vector<Event> events) override;

 private:
  struct Conn;
  using ConnPtr = std::shared_ptr<Conn>;
  static ConnPtr served(const ConnectionPtr& c);

  // ConnectionOwner
  void on_input(const ConnectionPtr& c, std::string_view bytes) override;
  void on_peer_eof(const ConnectionPtr& c) override;
  bool input_full(const Connection& c) const override;
  void on_close(const ConnectionPtr& c) override;
  void on_failure(const ConnectionPtr& c, const char* what) override;

  void serve(const ConnPtr& c);
  bool defer(const ConnPtr& c, ProtocolAdapter::Defer d);  // false: it ran here
  void prepared(const ConnPtr& c);
  void start_request(const ConnPtr& c, ProtocolAdapter::Start start);
  void begin_request(const ConnPtr& c, ProtocolAdapter::Start start);  // its slots taken
  void admit_waiting();                                  // slots came free: the oldest waiters start
  void leave_line(const ConnPtr& c);                     // a waiting request goes (closed, cancelled, expired)
  void refuse_waiting(const ConnPtr& c, Status why);     // answers a waiting request and takes it out
  void expire_waiting();                                 // those that waited past max_wait
  void answer(const ConnPtr& c, ProtocolAdapter::Answer a);
  void on_events(std::vector<Event>& events);
  void on_event(const ConnPtr& c, const Event& ev);
  void release_request(const ConnPtr& c);  // unbinds it and gives its slots back
  void cancel_all(const ConnPtr& c);       // every choice of the request in flight
  void end_request(const ConnPtr& c);
  void sweep_idle();
  void maybe_done();

  struct Listener {
    FrontEndConfig config;
    AdapterFactory make_adapter;
    std::int32_t open = 0;
  };
  Listener& listener(FrontEnd f) { return listeners_[static_cast<std::size_t>(f)]; }
  const FrontEndConfig& config_of(const Conn& c) const;

  boost::asio::io_context& io_;
  std::array<Listener, kFrontEnds> listeners_;
  ServerMetrics& metrics_;
  SessionSlots& slots_;
  WorkSubmit submit_;
  Offload offload_;
  ConnectionTable<Conn> table_;
  SlotQueue slot_queue_;
  std::deque<ConnPtr> waiting_;  // oldest first; each holds its request in Conn::waiting
  boost::asio::steady_timer sweep_timer_;
  boost::asio::steady_timer shutdown_timer_;
  bool shutting_down_ = false;
  std::function<void()> on_all_closed_;
};

}  // namespace uma
