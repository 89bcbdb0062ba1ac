// TickBudget: how many tokens one tick may carry, adapted so a tick takes about target_ms.
//
// It keeps an EWMA of decode time per batch token, learned from ticks big enough to measure
// (>= kMinSample tokens), and sets target = target_ms / ms_per_token, clamped to [floor, n_batch].
// It starts conservative and grows as measurements arrive (seed 000, "Tuning guidance").
// Not thread-safe; owned by the scheduler.
#pragma once

#include <algorithm>
#include <cstdint>

namespace uma {

class TickBudget {
 public:
  static constexpr std::int32_t kMinSample = 16;

  TickBudget(std::int32_t n_batch, double target_ms, std::int32_t start, std::int32_t floor = 16)
      : n_batch_(n_batch), target_ms_(target_ms), floor_(std::min(floor, n_batch)),
        target_(std::clamp(start, floor_, n_batch)) {}

  std::int32_t target() const { return target_; }
  double decode_ms_ewma() const { return decode_ms_ewma_; }
  double ms_per_token() const { return ms_per_token_; }

  void observe(double decode_ms, std::int32_t n_tokens) {
    decode_ms_ewma_ = decode_ms_ewma_ == 0.0 ? decode_ms : kAlpha * decode_ms + (1 - kAlpha) * decode_ms_ewma_;
    if (n_tokens < kMinSample) return;
    const double per_token = decode_ms / n_tokens;
    ms_per_token_ = ms_per_token_ == 0.0 ? per_token : kAlpha * per_token + (1 - kAlpha) * ms_per_token_;
    const double want = target_ms_ / std::max(ms_per_token_, 1e-6);
    target_ = static_cast<std::int32_t>(std::clamp(want, double(floor_), double(n_batch_)));
  }

 private:
  static constexpr double kAlpha = 0.2;
  std::int32_t n_batch_;
  double target_ms_;
  std::int32_t floor_;
  std::int32_t target_;
  double decode_ms_ewma_ = 0.0;
  double ms_per_token_ = 0.0;
};

}  // namespace uma
