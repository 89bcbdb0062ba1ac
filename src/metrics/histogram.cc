#include "metrics/histogram.h"

#include <algorithm>

namespace uma {

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)) {
  std::sort(bounds_.begin(), bounds_.end());
  counts_ = std::make_unique<std::atomic<std::uint64_t>[]>(bounds_.size() + 1);
  for (std::size_t i = 0; i <= bounds_.size(); ++i) counts_[i] = 0;
}

void Histogram::observe(double value) {
  const auto it = std::lower_bound(bounds_.begin(), bounds_.end(), value);
  counts_[static_cast<std::size_t>(it - bounds_.begin())].fetch_add(1, std::memory_order_relaxed);
  double cur = sum_.load(std::memory_order_relaxed);
  while (!sum_.compare_exchange_weak(cur, cur + value, std::memory_order_relaxed)) {
  }
  count_.fetch_add(1, std::memory_order_relaxed);
}

Histogram::Snapshot Histogram::snapshot() const {
  Snapshot s;
  s.bounds = bounds_;
  std::uint64_t running = 0;
  for (std::size_t i = 0; i <= bounds_.size(); ++i) {
    running += counts_[i].load(std::memory_order_relaxed);
    s.cumulative.push_back(running);
  }
  s.count = running;
  s.sum = sum_.load(std::memory_order_relaxed);
  return s;
}

double Histogram::quantile(const Snapshot& s, double q) {
  if (s.count == 0) return 0.0;
  const double rank = q * static_cast<double>(s.count);
  for (std::size_t i = 0; i < s.cumulative.size(); ++i) {
    if (static_cast<double>(s.cumulative[i]) >= rank) {
      if (i == s.bounds.size()) return s.bounds.empty() ? 0.0 : s.bounds.back();  // +Inf: clamp
      const double lo = i == 0 ? 0.0 : s.bounds[i - 1];
      const double below = i == 0 ? 0.0 : static_cast<double>(s.cumulative[i - 1]);
      const double in_bucket = static_cast<double>(s.cumulative[i]) - below;
      return lo + (s.bounds[i] - lo) * (in_bucket > 0 ? (rank - below) / in_bucket : 1.0);
    }
  }
  return s.bounds.empty() ? 0.0 : s.bounds.back();
}

std::vector<double> latency_ms_bounds() {
  return {1, 2, 5, 10, 20, 30, 50, 75, 100, 150, 200, 300, 500, 750, 1000, 2000, 5000, 10000, 30000, 60000};
}

std::vector<double> token_count_bounds() { return {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096}; }

}  // namespace uma
