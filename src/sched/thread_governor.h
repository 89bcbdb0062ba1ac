// ThreadGovernor: how many threads the next decode computes with, on CPUs shared with others.
//
// ggml's thread pool meets at a barrier after every operation of a graph, so a decode runs at the
// pace of its slowest thread: one thread whose core a neighbour holds stalls all of them at every
// layer (one busy core of two cost llama-server three quarters of its speed, not half). A pool as
// large as the cores nobody else uses has no such thread. Two signals:
// - windows (observe_window, every kWindowMs of serving): the cores others kept busy among ours
//   (cpu_meter.h). Threads = the CPUs left (at most the cores a quota allows), counting a core
//   others use less than kSlack of as free: fewer at once, more only after kUpWindows windows in a row agree (a neighbour that comes
//   and goes is not followed up at every gap).
// - decodes (observe_decode, a decode computed on the host): its process CPU time over its wall
//   time and thread count. Under kStarved the pool waited for a taken core in this very decode: one
//   thread fewer at once, without waiting for the window.
// A neighbour of lower priority fills our idle cores but yields them when we compute: its windows
// look busy. So a pool held below `most` by the windows alone tries one thread more for one decode
// now and then (kProbeFirstMs, doubling to kProbeMostMs while tries fail) and keeps it when that
// decode was not starved.
// The count changes only between decodes and never changes what a decode computes (ggml splits
// rows between threads; each row's arithmetic is the same).
// Pure arithmetic on what it is told; tested on synthetic machines. Not thread-safe.
#pragma once

#include <cstdint>

namespace uma {

class ThreadGovernor {
 public:
  static constexpr double kWindowMs = 250.0;
  static constexpr double kSlack = 0.3;        // others' share of a core still counted as ours
  static constexpr int kUpWindows = 2;
  static constexpr double kStarved = 0.7;      // CPU time / (wall * threads) of a starved decode
  static constexpr double kMinDecodeMs = 2.0;  // shorter decodes say too little
  static constexpr double kProbeFirstMs = 2000.0;
  static constexpr double kProbeMostMs = 64000.0;

  // most: the cores this process may use (CpuMeter::allowed_cores); cpus: the CPUs it may run on,
  // which others share (CpuMeter::mask_cpus: more than `most` under a cgroup quota); adaptive =
  // false keeps `most`.
  ThreadGovernor(int most, int cpus, bool adaptive);

  int threads() const { return threads_; }
  int most() const { return most_; }
  bool adaptive() const { return adaptive_; }
  double others_cores() const { return others_; }  // the last window's
  std::uint64_t changes() const { return changes_; }

  // The threads the machine leaves us when others keep `others` cores of ours busy.
  int fit(double others) const;
  // A window ended `now_ms` (serving time) with others keeping `others` cores busy.
  void observe_window(double now_ms, double others);
  // A decode on the host took wall_ms and the process cpu_ms with threads() threads.
  void observe_decode(double now_ms, double wall_ms, double cpu_ms);
  // The threads for a decode starting at now_ms: threads(), or one more when a try is due.
  int threads_for_decode(double now_ms);

 private:
  void set(int n);

  int most_;
  int cpus_;
  bool adaptive_;
  int threads_;
  double others_ = 0.0;
  int up_windows_ = 0;
  int window_fit_ = 0;         // what the last window allows
  bool probing_ = false;       // the decode in flight is a try of threads_ + 1
  double next_probe_ms_ = -1;  // < 0: no try planned
  double now_ms_ = 0.0;
  double window_started_ms_ = 0.0;
  double last_up_ms_ = -1.0;   // when the pool last grew
  double probe_gap_ms_ = kProbeFirstMs;
  std::uint64_t changes_ = 0;
};

}  // namespace uma
