// TimeSource: where sched/ reads the time (LevelDB's Env idea, for the clock only).
//
// The daemon uses the steady clock (steady_time()). Tests give the Scheduler a ManualClock and
// advance it, so what depends on time (TTFT and inter-token targets, queue age limits, background
// wait bounds, idle prefixes, pause durations) runs on virtual time: no sleeps, no flakiness on a
// loaded machine. Requests carry `received_at` from the same source (the I/O thread stamps it with
// the steady clock; a test stamps it with its ManualClock).
// Thread-safety: now() may be called from any thread; ManualClock::advance from one thread.
#pragma once

#include <atomic>
#include <chrono>

#include "serve/request.h"

namespace uma {

class TimeSource {
 public:
  virtual ~TimeSource() = default;
  virtual Clock::time_point now() const = 0;
};

// The process's steady clock.
const TimeSource& steady_time();

class ManualClock final : public TimeSource {
 public:
  Clock::time_point now() const override { return Clock::time_point(Clock::duration(ns_.load())); }
  void advance(Clock::duration d) { ns_.fetch_add(d.count()); }

 private:
  std::atomic<Clock::rep> ns_{Clock::duration(std::chrono::hours(1)).count()};  // not the epoch: "before" stays representable
};

}  // namespace uma
