// SessionSlots: the daemon's one admission for requests, shared by every front end. A slot
// belongs to a request from the moment it is accepted until its last event (or its cancel), never
// to a connection: an idle keep-alive client holds none, and `--max-sessions` bounds the requests
// of all front ends together (it is also the number of KV sequences the scheduler has for them).
//
// Thread-safety: none. Every front end runs on the daemon's one I/O thread (daemon/main.cc).
// Ownership: the daemon owns it; front ends hold a reference and take and give back slots.
// Metrics: the labelled gauge `sessions_open{front_end}` counts each front end's slots.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>

namespace uma {

enum class FrontEnd : std::uint8_t { kUnixSocket = 0, kHttp = 1 };
inline constexpr std::size_t kFrontEnds = 2;

class SessionSlots {
 public:
  using Gauges = std::array<std::atomic<std::int64_t>*, kFrontEnds>;  // nullptr: not published
  SessionSlots(std::int32_t max, Gauges gauges = {}) : max_(max), gauges_(gauges) {}
  SessionSlots(const SessionSlots&) = delete;
  SessionSlots& operator=(const SessionSlots&) = delete;

  // Told the slots in use after every change (a supervised umad reports busy/idle from it).
  void set_observer(std::function<void(std::int32_t in_use)> observer) { observer_ = std::move(observer); }

  std::int32_t max() const { return max_; }
  std::int32_t in_use() const { return used_[0] + used_[1]; }
  std::int32_t in_use(FrontEnd f) const { return used_[index(f)]; }

  // Takes `n` slots for `n` requests of `f` (a request's choices), all or none; false when fewer
  // than n are free.
  bool try_take(FrontEnd f, std::int32_t n = 1) {
    if (in_use() + n > max_) return false;
    used_[index(f)] += n;
    publish(f);
    return true;
  }
  // Gives back a slot `f` took. A give-back with none taken is a bug in the caller: abort loudly.
  void give_back(FrontEnd f) {
    if (used_[index(f)] <= 0) {
      std::fprintf(stderr, "SessionSlots: give_back with no slot taken by front end %zu\n", index(f));
      std::abort();
    }
    --used_[index(f)];
    publish(f);
  }

 private:
  static std::size_t index(FrontEnd f) { return static_cast<std::size_t>(f); }
  void publish(FrontEnd f) {
    if (gauges_[index(f)] != nullptr) gauges_[index(f)]->store(used_[index(f)]);
    if (observer_) observer_(in_use());
  }
  std::int32_t max_;
  Gauges gauges_;
  std::array<std::int32_t, kFrontEnds> used_{};
  std::function<void(std::int32_t)> observer_;
};

}  // namespace uma
