#include "sched/thread_governor.h"

#include <algorithm>
#include <cmath>

namespace uma {

ThreadGovernor::ThreadGovernor(int most, int cpus, bool adaptive)
    : most_(std::max(1, most)), cpus_(std::max(most_, cpus)), adaptive_(adaptive), threads_(most_) {}

int ThreadGovernor::fit(double others) const {
  const int taken = static_cast<int>(std::ceil(others - kSlack));
  return std::clamp(cpus_ - std::max(taken, 0), 1, most_);
}

void ThreadGovernor::set(int n) {
  n = std::clamp(n, 1, most_);
  if (n == threads_) return;
  threads_ = n;
  ++changes_;
}

void ThreadGovernor::observe_window(double others) {
  others_ = others;
  if (!adaptive_) return;
  const int fits = fit(others);
  if (fits < threads_) {
    set(fits);
    up_windows_ = 0;
  } else if (fits > threads_) {
    if (++up_windows_ >= kUpWindows) {
      set(fits);
      up_windows_ = 0;
    }
  } else {
    up_windows_ = 0;
  }
}

void ThreadGovernor::observe_decode(double wall_ms, double cpu_ms) {
  if (!adaptive_ || threads_ <= 1 || wall_ms < kMinDecodeMs) return;
  if (cpu_ms / (wall_ms * threads_) < kStarved) {
    set(threads_ - 1);
    up_windows_ = 0;
  }
}

}  // namespace uma
