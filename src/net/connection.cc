#include "net/connection.h"

#include <boost/asio/write.hpp>
#include <poll.h>
#include <spdlog/spdlog.h>

#include <cstdlib>

#include "net/guarded.h"

namespace uma {

namespace asio = boost::asio;

const StateTable<ConnState, 5>& conn_states() {
  using S = ConnState;
  static const StateTable<ConnState, 5> table("connection", {"idle", "busy", "preparing", "closing", "closed"},
                                              {{S::kIdle, {S::kBusy, S::kPreparing, S::kClosing, S::kClosed}},
                                               {S::kBusy, {S::kIdle, S::kClosing, S::kClosed}},
                                               {S::kPreparing, {S::kIdle, S::kClosing, S::kClosed}},
                                               {S::kClosing, {S::kClosing, S::kClosed}}});
  return table;
}

Connection::Connection(StreamSocket socket, std::uint64_t id, const ConnectionOptions& options, ConnectionOwner& owner)
    : socket_(std::move(socket)), id_(id), options_(options), owner_(owner), tx_(options.max_tx_bytes),
      quiet_since_(Clock::now()) {}

void Connection::set_state(ConnState to) {
  move_state(conn_states(), state_, to, id_);
  if (to == ConnState::kIdle) quiet_since_ = Clock::now();
}

template <typename F>
void Connection::guarded(F&& f) {
  run_guarded(std::forward<F>(f), [this](const char* what) { owner_.on_failure(shared_from_this(), what); });
}

void Connection::start_reading() {
  if (reading_ || peer_eof_ || closed() || owner_.input_full(*this)) return;
  reading_ = true;
  socket_.async_read_some(asio::buffer(rbuf_), [self = shared_from_this()](const boost::system::error_code& ec, std::size_t n) {
    self->reading_ = false;
    self->guarded([&] { self->on_read(ec, n); });
  });
}

// A Unix socket reports POLLHUP only when the peer closed both directions; EOF without it is a
// half-close (the client still wants its replies).
bool Connection::peer_hung_up() {
  pollfd p{socket_.native_handle(), 0, 0};
  return ::poll(&p, 1, 0) == 1 && (p.revents & POLLHUP) != 0;
}

void Connection::on_read(const boost::system::error_code& ec, std::size_t n) {
  if (closed()) return;
  if (ec == asio::error::eof) {
    if (options_.eof_closes || peer_hung_up()) return close("peer closed");
    peer_eof_ = true;
    return owner_.on_peer_eof(shared_from_this());
  }
  if (ec) return close("read error");
  owner_.on_input(shared_from_this(), std::string_view(rbuf_.data(), n));
  start_reading();
}

bool Connection::send(std::string_view bytes) {
  if (closed()) return false;
  if (bytes.empty()) return true;
  if (!tx_.push(bytes)) {
    if (options_.tx_drops != nullptr) options_.tx_drops->fetch_add(1, std::memory_order_relaxed);
    spdlog::warn("{} {}: dropped, reader too slow ({} bytes unsent)", options_.log_name, id_, tx_.unsent());
    close("tx cap");
    return false;
  }
  arm_write();
  return true;
}

void Connection::arm_write() {
  if (!tx_.can_start() || closed()) return;
  const std::string_view bytes = tx_.begin_write();
  asio::async_write(socket_, asio::buffer(bytes.data(), bytes.size()),
                    [self = shared_from_this()](const boost::system::error_code& ec, std::size_t) {
                      self->tx_.finish_write();
                      if (self->closed()) return;
                      if (ec) return self->close("write error");
                      self->quiet_since_ = Clock::now();
                      if (self->tx_.can_start()) return self->arm_write();
                      if (self->state_ == ConnState::kClosing) self->close("done");
                    });
}

void Connection::close_when_flushed() {
  if (closed()) return;
  set_state(ConnState::kClosing);
  if (tx_.flushed()) close("done");
}

void Connection::close(const char* why) {
  if (closed()) return;
  set_state(ConnState::kClosed);
  boost::system::error_code ignored;
  socket_.shutdown(StreamSocket::shutdown_both, ignored);
  socket_.close(ignored);  // pending operations complete with operation_aborted; they see kClosed
  spdlog::debug("{} {}: closed ({})", options_.log_name, id_, why);
  owner_.on_close(shared_from_this());
}

}  // namespace uma
