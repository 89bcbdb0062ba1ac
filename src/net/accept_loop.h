// AcceptLoop: keeps one accept armed on a listening socket for as long as the server runs, for
// every front end (the Unix socket and HTTP share it).
//
// - Each accepted socket goes to `on_accept`; the owner decides (connection caps live there).
// - Out of descriptors or memory (EMFILE, ENFILE, ENOBUFS, ENOMEM): accepting pauses and is retried
//   after a backoff (kFirstBackoff doubling to kMaxBackoff), the way memcached's
//   accept_new_conns(false) does, instead of re-arming at once and spinning a core. Connections
//   wait in the kernel's listen queue meanwhile. One warning when an episode starts and one line
//   with the count when it ends: a flood never floods the log.
// - Any other error (a connection aborted before it was accepted, ...) is retried the same way:
//   accepting ends only with stop() (or the acceptor being closed by its owner).
//
// Threading: everything runs on the I/O thread that runs `io`. Ownership: the loop refers to an
// acceptor its owner keeps alive; the owner calls stop() before destroying either.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/socket_base.hpp>
#include <boost/asio/steady_timer.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>

namespace uma {

template <typename Acceptor>
class AcceptLoop {
 public:
  using Socket = typename Acceptor::protocol_type::socket;
  using OnAccept = std::function<void(Socket)>;
  static constexpr std::chrono::milliseconds kFirstBackoff{10};
  static constexpr std::chrono::milliseconds kMaxBackoff{100};

  // `paused_total` counts pause episodes (a metric; may be null).
  AcceptLoop(boost::asio::io_context& io, Acceptor& acceptor, std::string name, OnAccept on_accept,
             std::atomic<std::uint64_t>* paused_total = nullptr)
      : acceptor_(acceptor), timer_(io), name_(std::move(name)), on_accept_(std::move(on_accept)),
        paused_total_(paused_total) {}

  void start() {
    stopped_ = false;
    arm();
  }
  void stop() {
    stopped_ = true;
    draining_ = false;
    timer_.cancel();
  }
  // Before the owner closes the acceptor of a graceful stop: an accept already completed still
  // goes to `on_accept`, and none is armed after it.
  void drain() {
    draining_ = true;
    timer_.cancel();
  }
  bool paused() const { return failures_ > 0; }

 private:
  void arm() {
    if (stopped_ || draining_ || !acceptor_.is_open()) return;
    acceptor_.async_accept([this](const boost::system::error_code& ec, Socket socket) {
      if (ec == boost::asio::error::operation_aborted) return;
      if (draining_) {
        if (!ec) on_accept_(std::move(socket));
        return;
      }
      if (stopped_) return;
      if (ec) return back_off(ec);
      if (failures_ > 0) {
        spdlog::info("accept on {}: resumed after {} failed attempts over {} ms", name_, failures_,
                     std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - since_).count());
        failures_ = 0;
      }
      on_accept_(std::move(socket));
      arm();
    });
  }

  void back_off(const boost::system::error_code& ec) {
    if (failures_++ == 0) {
      since_ = std::chrono::steady_clock::now();
      backoff_ = kFirstBackoff;
      if (paused_total_ != nullptr) paused_total_->fetch_add(1, std::memory_order_relaxed);
      const bool exhausted = ec.value() == EMFILE || ec.value() == ENFILE || ec.value() == ENOBUFS || ec.value() == ENOMEM;
      spdlog::warn("accept on {}: {}; {}retrying every {}-{} ms until it succeeds", name_, ec.message(),
                   exhausted ? "out of resources, accepting paused, " : "", kFirstBackoff.count(), kMaxBackoff.count());
    } else {
      backoff_ = std::min(backoff_ * 2, std::chrono::duration_cast<std::chrono::milliseconds>(kMaxBackoff));
    }
    timer_.expires_after(backoff_);
    timer_.async_wait([this](const boost::system::error_code& wait_ec) {
      if (!wait_ec) arm();
    });
  }

  Acceptor& acceptor_;
  boost::asio::steady_timer timer_;
  std::string name_;
  OnAccept on_accept_;
  std::atomic<std::uint64_t>* paused_total_;
  bool stopped_ = true;
  bool draining_ = false;
  std::uint64_t failures_ = 0;
  std::chrono::steady_clock::time_point since_{};
  std::chrono::milliseconds backoff_{kFirstBackoff};
};

}  // namespace uma
