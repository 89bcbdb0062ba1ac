// TickBudget: how many prompt tokens one tick may prefill next to its decode tokens.
//
// Every decoding stream gets one token per tick, so a tick's duration is every stream's
// inter-token gap. The budget keeps that gap near twice the decode-only tick (and at least
// target_ms), using a two-part cost model learned online:
//   tick_ms ~= base_ms (a tick of decode tokens only) + prefill_tokens * ms_per_prefill_token
//   budget   = (max(2 * base_ms, target_ms) - base_ms) / ms_per_prefill_token
// clamped to [floor, n_batch]. Both parts are EWMAs; until they are measured the budget is
// `start` (seed 000, "Tuning guidance": start conservative, let it grow). With nobody decoding
// the policy ignores the budget and prefills at full capacity.
// Not thread-safe; owned by the scheduler.
#pragma once

#include <algorithm>
#include <cstdint>

namespace uma {

class TickBudget {
 public:
  static constexpr std::int32_t kMinSample = 16;  // prefill tokens needed to measure their cost

  TickBudget(std::int32_t n_batch, double target_ms, std::int32_t start, std::int32_t floor = 16)
      : n_batch_(n_batch), target_ms_(target_ms), floor_(std::min(floor, n_batch)), start_(std::clamp(start, floor_, n_batch)) {}

  std::int32_t prefill_budget() const {
    if (ms_per_prefill_token_ <= 0.0) return start_;
    const double allowed = std::max(2.0 * base_ms_, target_ms_);
    const double want = (allowed - base_ms_) / ms_per_prefill_token_;
    return static_cast<std::int32_t>(std::clamp(want, double(floor_), double(n_batch_)));
  }
  double decode_ms_ewma() const { return decode_ms_ewma_; }
  double base_ms() const { return base_ms_; }
  double ms_per_prefill_token() const { return ms_per_prefill_token_; }

  void observe(double decode_ms, std::int32_t n_decode, std::int32_t n_prefill) {
    decode_ms_ewma_ = ewma(decode_ms_ewma_, decode_ms);
    if (n_prefill == 0 && n_decode > 0) {
      base_ms_ = ewma(base_ms_, decode_ms);
    } else if (n_prefill >= kMinSample) {
      const double prefill_part = n_decode > 0 ? std::max(decode_ms - base_ms_, 0.1 * decode_ms) : decode_ms;
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
  double base_ms_ = 0.0;
  double ms_per_prefill_token_ = 0.0;
};

}  // namespace uma
