// TickBudget: how many prompt tokens one tick may prefill next to its decode tokens.
//
// Every decoding stream gets one token per tick, so a tick's duration is every stream's
// inter-token gap. The goal: a tick that carries prefill lasts at most
//   target(n) = max(2 * base_ms(n), target_ms)
// where base_ms(n) is the decode-only tick with n streams, learned per n (a long prefill can
// run for many seconds without a decode-only tick; a base learned with fewer streams would be far
// too small; an n not seen yet takes the nearest smaller n's base scaled by the stream count).
//
// A cost model alone misses what changes under it (a deep KV makes both decode and prefill dearer
// as a long prompt goes in), so the budget is a feedback controller on the measured ticks: after a
// tick with decode and prefill, budget *= target / tick_ms, down by at most a third per tick, up
// by at most 10% and only with 20% headroom, within [floor, n_batch]. It starts at `start`, low, and grows.
// ms_per_prefill_token is also kept (EWMA of a tick's time over its decode-only base, per prefill
// token) for estimates elsewhere: TTFT slack and the cost of recomputing a paused session.
//
// Prefill also has a fixed cost per tick, which on a GPU dominates small chunks: with per-sequence
// KV a prompt's tokens are a second pass over the weights, and a new batch shape a new graph
// (a GPU, 1B model, 64 streams: a fixed floor of 512 tokens gave +33% tok/s and a third of the
// TTFT p99 of a floor of 8; docs/BENCHMARKS.md). So the cost is fitted as fixed + n * per_token
// (least squares over recent prefill ticks, forgetting old ones), and no tick prefills fewer
// tokens than make its token work as large as the fixed part (floor(), at most a quarter of the
// batch): a chunk smaller than that mostly buys overhead. On a CPU the fixed part fits to about
// zero and the floor stays `floor`.
// What the machine was is not what it is: the calibration's samples are a first guess, dropped
// from the fit at the first serving tick that prefills; no sample moves an average by more
// than kSampleBound allows; and an intercept over twice the smallest recent prefill cost is
// dropped (a calibration beside a neighbour's burst fitted 1374 ms fixed to a 30 ms tick).
// With nobody decoding the policy ignores the budget and prefills at full capacity.
// Not thread-safe; owned by the scheduler.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace uma {

class TickBudget {
 public:
  static constexpr std::int32_t kMinSample = 16;  // prefill tokens needed to measure their cost

  TickBudget(std::int32_t n_batch, double target_ms, std::int32_t start, std::int32_t floor = 8)
      : n_batch_(n_batch), target_ms_(target_ms), floor_(std::min(floor, n_batch)),
        budget_(std::clamp(start, floor_, n_batch)) {}

  // The controller's budget, but never more than the cost model predicts fits the target with n
  // streams decoding: the controller corrects the model's drift, the model keeps the controller's
  // first step (after a quiet spell, or when streams come and go) from overshooting.
  std::int32_t prefill_budget(std::int32_t n_decode) const {
    double b = budget_;
    const double k = ms_per_prefill_token();
    if (k > 0 && n_decode > 0) {
      b = std::min(b, (target_ms(n_decode) - base_ms(n_decode) - fixed_ms_) / k);
    }
    return static_cast<std::int32_t>(std::clamp(b, double(floor()), double(n_batch_)));
  }
  // Prefill tokens that take about `ms` (the whole batch until the cost is measured).
  std::int32_t tokens_in(double ms) const {
    const double k = ms_per_prefill_token();
    if (k <= 0) return n_batch_;
    return static_cast<std::int32_t>(std::clamp((ms - fixed_ms_) / k, double(floor()), double(n_batch_)));
  }
  // The fewest prefill tokens a tick carries next to decoding streams (see above).
  std::int32_t floor() const {
    if (fixed_ms_ <= 0 || affine_per_token_ <= 0) return floor_;
    const double most = std::max(floor_, n_batch_ / 4);
    return static_cast<std::int32_t>(std::clamp(fixed_ms_ / affine_per_token_, double(floor_), most));
  }
  // The fixed part of a tick's prefill cost (0 until fitted, or when it fits to zero).
  double prefill_fixed_ms() const { return fixed_ms_; }
  // The longest a tick with n decoding streams should take.
  double target_ms(std::int32_t n_decode) const { return std::max(2.0 * base_ms(n_decode), target_ms_); }
  double decode_ms_ewma() const { return decode_ms_ewma_; }
  // The decode-only tick with n streams (0 until any decode-only tick was seen).
  double base_ms(std::int32_t n) const {
    if (n <= 0) return 0.0;
    const auto k = static_cast<std::size_t>(n);
    if (k < base_by_n_.size() && base_by_n_[k] > 0) return base_by_n_[k];
    for (std::size_t m = std::min(k, base_by_n_.size()); m-- > 1;) {
      if (base_by_n_[m] > 0) return base_by_n_[m] * double(k) / double(m);
    }
    for (std::size_t m = k + 1; m < base_by_n_.size(); ++m) {
      if (base_by_n_[m] > 0) return base_by_n_[m];
    }
    return 0.0;
  }
  // The marginal cost of a prefill token: the fitted slope when a fixed part was found, else the
  // EWMA of whole prefill cost per token.
  double ms_per_prefill_token() const { return fixed_ms_ > 0 ? affine_per_token_ : ms_per_prefill_token_; }

  // A prompt chunk timed outside serving (Scheduler::calibrate): the cost model learns from it;
  // the controller and the tick EWMA, which describe ticks with streams, do not.
  // These are a first guess: the first serving tick that prefills drops them from the fit (its
  // fixed part stays until the serving ticks refit or contradict it).
  void observe_prefill(double ms, std::int32_t n_prefill) {
    if (n_prefill >= kMinSample) ms_per_prefill_token_ = ewma(ms_per_prefill_token_, ms / n_prefill);
    if (n_prefill > 0) fit(n_prefill, ms);
    provisional_ = true;
  }

  // prefill_pending: some prompt was waiting to be prefilled (a decode-only tick then is the
  // latency guard's, at whatever depth the arriving prompt has reached, not the steady cadence).
  void observe(double tick_ms, std::int32_t n_decode, std::int32_t n_prefill, bool prefill_pending = false) {
    decode_ms_ewma_ = ewma(decode_ms_ewma_, tick_ms);
    ++ticks_;
    if (n_prefill == 0 && n_decode > 0) {
      if (prefill_pending) return;
      last_base_tick_ = ticks_;
      const auto k = static_cast<std::size_t>(n_decode);
      if (base_by_n_.size() <= k) base_by_n_.resize(k + 1, 0.0);
      base_by_n_[k] = ewma(base_by_n_[k], tick_ms);
      return;
    }
    if (n_prefill >= kMinSample) {
      const double prefill_part = n_decode > 0 ? std::max(tick_ms - base_ms(n_decode), 0.1 * tick_ms) : tick_ms;
      ms_per_prefill_token_ = ewma(ms_per_prefill_token_, prefill_part / n_prefill);
    }
    // The fit reads a tick's prefill part against the decode-only base; a base not measured
    // lately (the KV has grown since) would pass for a fixed cost.
    const bool base_fresh = n_decode == 0 || (base_ms(n_decode) > 0 && ticks_ - last_base_tick_ <= kFreshTicks);
    if (n_prefill > 0 && base_fresh) {
      if (provisional_) forget_calibration();
      fit(n_prefill, n_decode > 0 ? std::max(tick_ms - base_ms(n_decode), 0.0) : tick_ms);
    }
    if (n_decode == 0 || tick_ms <= 0) return;
    // Down fast, up slowly and only with clear headroom: an overshoot is a stall every stream sees.
    const double ratio = target_ms(n_decode) / tick_ms;
    double step = 1.0;
    if (ratio < 1.0) step = std::max(ratio, 0.67);
    else if (ratio > 1.2 && n_prefill + 1 >= static_cast<std::int32_t>(budget_)) step = std::min(ratio, 1.1);
    // (a tick that had less prefill work than its budget says nothing about a larger budget)
    budget_ = std::clamp(budget_ * step, double(floor()), double(n_batch_));
  }

 private:
  // One sample moves an average as one within kSampleBound of it would (a neighbour's burst is
  // noise; a lasting change still moves it by up to 60% a tick).
  static double ewma(double current, double sample) {
    if (current == 0.0) return sample;
    return 0.2 * std::clamp(sample, current / kSampleBound, current * kSampleBound) + 0.8 * current;
  }
  void forget_calibration() {
    s0_ = sx_ = sxx_ = sy_ = sxy_ = 0.0;
    provisional_ = false;
  }

  // Weighted least squares of prefill time y over prefill tokens x (weights decay by kKeep per
  // sample). The intercept is refitted only when the recent chunk sizes spread enough to tell it
  // from the slope (a steady state at the floor does not); the slope follows every sample.
  void fit(double x, double y) {
    s0_ = kKeep * s0_ + 1.0;
    sx_ = kKeep * sx_ + x;
    sxx_ = kKeep * sxx_ + x * x;
    sy_ = kKeep * sy_ + y;
    sxy_ = kKeep * sxy_ + x * y;
    const double mx = sx_ / s0_, my = sy_ / s0_;
    const double vx = sxx_ / s0_ - mx * mx, cxy = sxy_ / s0_ - mx * my;
    if (s0_ >= 4.0 && vx > 0.0625 * mx * mx && cxy > 0) fixed_ms_ = std::max(my - cxy / vx * mx, 0.0);
    // A tick's fixed part is not twice a whole recent prefill's cost (the smallest of the last
    // kRecent): an intercept the measurements contradict (a calibration beside a neighbour's burst)
    // is dropped, and the per-token average stands in until the sizes spread enough to fit another.
    recent_y_[recent_at_++ % kRecent] = y;
    const std::size_t seen = std::min<std::size_t>(recent_at_, kRecent);
    const double least = *std::min_element(recent_y_.begin(), recent_y_.begin() + static_cast<long>(seen));
    if (fixed_ms_ > 2 * least) fixed_ms_ = 0.0, affine_per_token_ = 0.0;
    if (fixed_ms_ > 0) affine_per_token_ = std::max((my - fixed_ms_) / mx, 1e-4);
  }

  std::int32_t n_batch_;
  double target_ms_;
  std::int32_t floor_;
  double budget_;
  double decode_ms_ewma_ = 0.0;
  std::vector<double> base_by_n_;  // index: decoding streams
  double ms_per_prefill_token_ = 0.0;
  double s0_ = 0.0, sx_ = 0.0, sxx_ = 0.0, sy_ = 0.0, sxy_ = 0.0;
  double fixed_ms_ = 0.0;
  double affine_per_token_ = 0.0;
  static constexpr std::size_t kRecent = 32;
  std::array<double, kRecent> recent_y_{};  // the last prefill costs fitted
  std::size_t recent_at_ = 0;
  bool provisional_ = false;    // the fit holds calibration samples only
  static constexpr double kKeep = 0.97;
  static constexpr double kSampleBound = 4.0;
  static constexpr std::uint64_t kFreshTicks = 16;
  std::uint64_t ticks_ = 0;
  std::uint64_t last_base_tick_ = 0;
};

}  // namespace uma
