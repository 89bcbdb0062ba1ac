// Connection: one stream socket (Unix or TCP; accepted, or later dialled by the gateway) and what
// every user of one does with it, written once:
// - one state (memcached's conn_states): idle -> busy -> idle ... -> closing -> closed, changed only
//   through set_state(), which aborts on a transition nobody wrote code for (idle -> preparing ->
//   idle when a request's input is parsed off the I/O thread first);
// - a read kept armed (so a peer that leaves is seen at once, even mid-request) unless the owner
//   says its unserved input is full (backpressure) or the peer has ended its side;
// - a write queue whose cap counts everything unsent, queued and in flight (net/tx_queue.h); a
//   reader too slow to keep up is dropped, never buffered without bound;
// - close_when_flushed() (answer, then close) and close(), which calls the owner's on_close once,
//   the one place where whatever the connection carried is cancelled;
// - quiet_since(): when it last became idle or finished a write, for the owner's idle timer;
// - an exception boundary around every owner callback it runs (net/guarded.h): what escapes goes to
//   the owner's on_failure, never to the I/O loop.
//
// Threading: none; everything runs on the I/O thread that runs the socket's io_context.
// Ownership and lifetime: always held by a shared_ptr (make it with std::make_shared). Each async
// operation holds one too, so a connection closed inside its own callback is freed only after the
// last callback returns (Redis's "never free a client inside its handler", by reference counting).
// The owner (a ConnectionOwner) outlives its connections' callbacks: it closes them all and lets
// the loop drain before it goes.
#pragma once

#include <boost/asio/generic/stream_protocol.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "common/state_machine.h"
#include "net/tx_queue.h"

namespace uma {

// Unix and TCP sockets alike (a basic_stream_socket of either converts into it).
using StreamSocket = boost::asio::generic::stream_protocol::socket;

enum class ConnState : std::uint8_t {
  kIdle,     // waiting for a request (or, outbound, free to send one)
  kBusy,     // a request is in flight
  kPreparing,  // its next input is being parsed off the I/O thread; nothing else is served meanwhile
  kClosing,  // what is queued is sent, then it closes; no new request starts
  kClosed,   // final
};
// The states by name and the transitions the servers are written for. A repeated "closing" (an
// error answered while flushing) is allowed and changes nothing.
const StateTable<ConnState, 5>& conn_states();

class Connection;
using ConnectionPtr = std::shared_ptr<Connection>;

// What a connection reports to whoever owns it (a server, or the gateway's client of an agent).
class ConnectionOwner {
 public:
  virtual ~ConnectionOwner() = default;
  virtual void on_input(const ConnectionPtr& c, std::string_view bytes) = 0;
  // The peer ended its side but may still read (a Unix-socket half-close): nothing more arrives.
  virtual void on_peer_eof(const ConnectionPtr& c) = 0;
  // True while the owner holds as much unserved input of `c` as it will: reading pauses until
  // the owner calls start_reading() again.
  virtual bool input_full(const Connection& c) const = 0;
  // Called once, as `c` closes (its state is already kClosed): cancel what it carried.
  virtual void on_close(const ConnectionPtr& c) = 0;
  // A callback the connection ran for the owner threw `what`.
  virtual void on_failure(const ConnectionPtr& c, const char* what) = 0;
};

struct ConnectionOptions {
  const char* log_name = "conn";  // logs say "<log_name> <id>: ..."
  std::size_t max_tx_bytes = 1 << 20;
  // EOF from the peer closes the connection (HTTP: a client that sends EOF has gone) instead of
  // being a half-close. Either way a full hang-up is a close.
  bool eof_closes = false;
  std::atomic<std::uint64_t>* tx_drops = nullptr;  // counts readers dropped at the cap
};

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::size_t kReadChunk = 4096;

  Connection(StreamSocket socket, std::uint64_t id, const ConnectionOptions& options, ConnectionOwner& owner);
  virtual ~Connection() = default;
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  std::uint64_t id() const { return id_; }
  ConnState state() const { return state_; }
  bool closed() const { return state_ == ConnState::kClosed; }
  void set_state(ConnState to);  // aborts on an illegal transition; becoming idle restarts quiet_since
  bool peer_eof() const { return peer_eof_; }
  bool flushed() const { return tx_.flushed(); }
  Clock::time_point quiet_since() const { return quiet_since_; }

  // Arms a read unless one is armed, the connection is closed, the peer ended, or the owner's
  // input is full.
  void start_reading();
  // Queues `bytes` and starts writing. False when nothing was queued: the connection is closed,
  // or was just dropped because everything unsent would exceed max_tx_bytes.
  bool send(std::string_view bytes);
  // Sends what is queued, then closes (at once when nothing is).
  void close_when_flushed();
  void close(const char* why);

 private:
  void on_read(const boost::system::error_code& ec, std::size_t n);
  void arm_write();
  bool peer_hung_up();
  template <typename F>
  void guarded(F&& f);

  StreamSocket socket_;
  std::uint64_t id_;
  ConnectionOptions options_;
  ConnectionOwner& owner_;
  TxQueue tx_;
  ConnState state_ = ConnState::kIdle;
  bool reading_ = false;
  bool peer_eof_ = false;
  Clock::time_point quiet_since_;
  std::array<char, kReadChunk> rbuf_{};
};

}  // namespace uma
