// ThreadGovernor: how many threads the next decode computes with, on CPUs shared with others.
//
// ggml's thread pool meets at a barrier after every operation of a graph, so a decode runs at the
// pace of its slowest thread: one thread whose core a neighbour holds stalls all of them at every
// layer (one busy core of two cost llama-server three quarters of its speed, not half). A pool as
// large as the cores nobody else uses has no such thread. Two signals:
// - windows (observe_window, every kWindowMs of serving): the cores others kept busy among ours
//   (cpu_meter.h). Threads = the CPUs left (at most the cores a quota allows), counting a core
//   others use less than kSlack of as free: fewer at once, more only after kUpWindows windows in a
//   row agree (a neighbour that comes and goes is not followed up at every gap).
// - decodes (observe_decode, a decode computed on the host): its process CPU time over its wall
//   time and thread count. Under kStarved the pool waited for a taken core in this very decode: one
//   thread fewer at once, without waiting for the window.
// A neighbour of lower priority (nice) fills our idle cores but yields them when we compute: its
// time is not counted (cpu_meter.h), unless this process runs niced itself.
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

  // most: the cores this process may use (CpuMeter::allowed_cores); cpus: the CPUs it may run on,
  // which others share (CpuMeter::mask_cpus: more than `most` under a cgroup quota); adaptive =
  // false keeps `most`.
  ThreadGovernor(int most, int cpus, bool adaptive);

  int threads() const { return threads_; }  // for the next decode
  bool adaptive() const { return adaptive_; }
  double others_cores() const { return others_; }  // the last window's
  std::uint64_t changes() const { return changes_; }

  // The threads the machine leaves us when others keep `others` cores of ours busy.
  int fit(double others) const;
  // A window ended with others keeping `others` cores of ours busy.
  void observe_window(double others);
  // A decode on the host took wall_ms and the process cpu_ms with threads() threads.
  void observe_decode(double wall_ms, double cpu_ms);

 private:
  void set(int n);

  int most_;
  int cpus_;
  bool adaptive_;
  int threads_;
  double others_ = 0.0;
  int up_windows_ = 0;
  std::uint64_t changes_ = 0;
};

}  // namespace uma
