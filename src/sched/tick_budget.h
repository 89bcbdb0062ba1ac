// TickBudget: how many prompt tokens one tick may prefill next to its decode tokens.
//
// Every decoding stream gets one token per tick, so a tick's duration is every stream's
// inter-token gap. The budget keeps that gap near twice the decode-only tick (and at least
// target_ms), using a two-part cost model learned online:
//   tick_ms ~= base_ms(n) (a tick of n decode tokens only) + prefill_tokens * ms_per_prefill_token
//   budget   = (max(2 * base_ms(n), target_ms) - base_ms(n)) / ms_per_prefill_token
// base_ms is learned per number of decoding streams n (a long prefill can run for many seconds
// with no decode-only tick; a base learned with fewer streams would then be far too small); for
// an n not seen yet, the nearest smaller n's base scaled by the stream count.
// clamped to [floor, n_batch]. Both parts are EWMAs; until they are measured the budget is
// `start` (seed 000, "Tuning guidance": start conservative, let it grow). With nobody decoding
// the policy ignores the budget and prefills at full capacity.
// Not thread-safe; owned by the scheduler.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace uma {

class TickBudget {
 public:
  static constexpr std::int32_t kMinSample = 16;  // prefill tokens needed to measure their cost

  TickBudget(std::int32_t n_batch, double target_ms, std::int32_t start, std::int32_t floor = 16)
      : n_batch_(n_batch), target_ms_(target_ms), floor_(std::min(floor, n_batch)), start_(std::clamp(start, floor_, n_batch)) {}

  std::int32_t prefill_budget(std::int32_t n_decode) const {
    if (ms_per_prefill_token_ <= 0.0) return start_;
    const double base = base_ms(n_decode);
    const double allowed = std::max(2.0 * base, target_ms_);
    const double want = (allowed - base) / ms_per_prefill_token_;
    return static_cast<std::int32_t>(std::clamp(want, double(floor_), double(n_batch_)));
  }
  double decode_ms_ewma() const { return decode_ms_ewma_; }
  // The decode-only tick with n streams (0 until any decode-only tick was seen).
  double base_ms(std::int32_t n) const {
    if (n <= 0) return 0.0;
    const auto k = static_cast<std::size_t>(n);
    if (k < base_by_n_.size() && base_by_n_[k] > 0) return base_by_n_[k];
    for (std::size_t m = std::min(k, base_by_n_.size()) ; m-- > 1;) {
      if (base_by_n_[m] > 0) return base_by_n_[m] * double(k) / double(m);
    }
    for (std::size_t m = k + 1; m < base_by_n_.size(); ++m) {
      if (base_by_n_[m] > 0) return base_by_n_[m];
    }
    return 0.0;
  }
  double ms_per_prefill_token() const { return ms_per_prefill_token_; }

  void observe(double decode_ms, std::int32_t n_decode, std::int32_t n_prefill) {
    decode_ms_ewma_ = ewma(decode_ms_ewma_, decode_ms);
    if (n_prefill == 0 && n_decode > 0) {
      const auto k = static_cast<std::size_t>(n_decode);
      if (base_by_n_.size() <= k) base_by_n_.resize(k + 1, 0.0);
      base_by_n_[k] = ewma(base_by_n_[k], decode_ms);
    } else if (n_prefill >= kMinSample) {
      const double prefill_part = n_decode > 0 ? std::max(decode_ms - base_ms(n_decode), 0.1 * decode_ms) : decode_ms;
      ms_per_prefill_token_ = ewma(ms_per_prefill_token_, prefill_part / n_prefill);
    }
  }

 private:
  static double ewma(double current, double sample) { return current == 0.0 ? sample : 0.2 * sample + 0.8 * current; }

  std::int32_t n_batch_;
  double target_ms_;
  std::int32_t floor_;
  std::int32_t start_;
  double decode_ms_ewma_ = 0.0;
  std::vector<double> base_by_n_;  // index: decoding streams
  double ms_per_prefill_token_ = 0.0;
};

}  // namespace uma
