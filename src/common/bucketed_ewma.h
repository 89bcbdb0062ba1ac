// BucketedEwma: an exponentially weighted mean kept apart per power-of-two bucket of a count
// (1, 2-3, 4-7, ...), for a cost that depends on how many rows or jobs share it. A draft model's
// call catching up sixteen sequences costs more than one catching up one; charged to a lone
// stream, the sixteen's cost turns its speculation off.
//
// value(n) is the mean of n's bucket, 0 before that bucket's first sample: an unmeasured count is
// tried, and so measured, rather than judged by another's cost. decay() moves a bucket towards 0,
// for a caller whose estimate only samples when it acts (so that a stale high one is tried again).
// Not thread-safe: a plain value, its owner's.
#pragma once

#include <array>
#include <cstddef>

namespace uma {

class BucketedEwma {
 public:
  static constexpr std::size_t kBuckets = 16;  // the last holds every count from 2^14 up

  explicit BucketedEwma(double weight = 0.2) : weight_(weight) {}

  // 0 for 0, 1 for 1, 2 for 2-3, 3 for 4-7, ...
  static std::size_t bucket_of(std::size_t n) {
    std::size_t b = 0;
    while (n > 0 && b + 1 < kBuckets) n >>= 1, ++b;
    return b;
  }
  void add(std::size_t n, double sample) {
    const std::size_t b = bucket_of(n);
    mean_[b] = seen_[b] ? (1.0 - weight_) * mean_[b] + weight_ * sample : sample;
    seen_[b] = true;
  }
  double value(std::size_t n) const { return mean_[bucket_of(n)]; }
  bool seen(std::size_t n) const { return seen_[bucket_of(n)]; }
  void decay(std::size_t n, double factor) { mean_[bucket_of(n)] *= factor; }

 private:
  std::array<double, kBuckets> mean_{};
  std::array<bool, kBuckets> seen_{};
  double weight_;
};

}  // namespace uma
