// Histogram: fixed upper bounds, lock-free observation, Prometheus-style cumulative snapshot.
//
// Thread-safety: observe() may be called from any thread (relaxed atomics; a snapshot taken
// concurrently may be off by the observations in flight, never torn per bucket). Bounds are
// fixed at construction and sorted ascending; a value lands in the first bucket whose bound is
// >= it (Prometheus `le`), or in the implicit +Inf bucket.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace uma {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);

  void observe(double value);

  struct Snapshot {
    std::vector<double> bounds;               // upper bounds, ascending
    std::vector<std::uint64_t> cumulative;    // count of values <= bounds[i]; last entry = +Inf
    double sum = 0.0;
    std::uint64_t count = 0;
  };
  Snapshot snapshot() const;
  // A quantile estimated from the buckets (linear within a bucket), 0 when empty.
  static double quantile(const Snapshot& s, double q);

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<std::uint64_t>[]> counts_;  // bounds_.size() + 1 (the +Inf bucket)
  std::atomic<double> sum_{0.0};
  std::atomic<std::uint64_t> count_{0};
};

// Bounds in milliseconds for latencies, and in tokens for batch sizes.
std::vector<double> latency_ms_bounds();
std::vector<double> token_count_bounds();

}  // namespace uma
