#include "sched/thread_governor.h"

#include <algorithm>
#include <cmath>

namespace uma {

ThreadGovernor::ThreadGovernor(int most, int cpus, bool adaptive)
    : most_(std::max(1, most)), cpus_(std::max(most_, cpus)), adaptive_(adaptive), threads_(most_), window_fit_(most_) {}

int ThreadGovernor::fit(double others) const {
  const int taken = static_cast<int>(std::ceil(others - kSlack));
  return std::clamp(cpus_ - std::max(taken, 0), 1, most_);
}

void ThreadGovernor::set(int n) {
  n = std::clamp(n, 1, most_);
  if (n == threads_) return;
  if (n > threads_) last_up_ms_ = now_ms_;
  threads_ = n;
  ++changes_;
}

void ThreadGovernor::observe_window(double now_ms, double others) {
  now_ms_ = now_ms;
  const double started = window_started_ms_;
  window_started_ms_ = now_ms;
  others_ = others;
  if (!adaptive_) return;
  window_fit_ = fit(others);
  if (window_fit_ < threads_) {
    // A window that began before the pool last grew mixes the neighbour's time on the core we took
    // since with ours: it says nothing against the larger pool.
    if (started < last_up_ms_) return;
    set(window_fit_);
    up_windows_ = 0;
  } else if (window_fit_ > threads_) {
    if (++up_windows_ >= kUpWindows) {
      set(window_fit_);
      up_windows_ = 0;
      probe_gap_ms_ = kProbeFirstMs;
    }
  } else {
    up_windows_ = 0;
  }
  if (threads_ >= most_) next_probe_ms_ = -1;
  else if (next_probe_ms_ < 0) next_probe_ms_ = now_ms + probe_gap_ms_;
}

int ThreadGovernor::threads_for_decode(double now_ms) {
  now_ms_ = now_ms;
  if (adaptive_ && !probing_ && threads_ < most_ && next_probe_ms_ >= 0 && now_ms >= next_probe_ms_) probing_ = true;
  return probing_ ? threads_ + 1 : threads_;
}

void ThreadGovernor::observe_decode(double now_ms, double wall_ms, double cpu_ms) {
  now_ms_ = now_ms;
  if (!adaptive_) return;
  const int n = probing_ ? threads_ + 1 : threads_;
  if (wall_ms < kMinDecodeMs) return;  // a try stays due for the next decode
  const double used = cpu_ms / (wall_ms * n);
  if (probing_) {
    probing_ = false;
    if (used >= kStarved) {
      set(threads_ + 1);
      probe_gap_ms_ = kProbeFirstMs;
    } else {
      probe_gap_ms_ = std::min(2 * probe_gap_ms_, kProbeMostMs);
    }
    next_probe_ms_ = threads_ < most_ ? now_ms + probe_gap_ms_ : -1;
    return;
  }
  if (n > 1 && used < kStarved) {
    set(threads_ - 1);
    up_windows_ = 0;
    if (next_probe_ms_ < now_ms + probe_gap_ms_) next_probe_ms_ = now_ms + probe_gap_ms_;
  }
}

}  // namespace uma
