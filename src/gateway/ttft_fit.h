// TtftFit: one agent's measured time to first token as a function of what routing knows when it
// sends a request there: the prompt tokens the agent must compute (`uncached`), the prompt tokens
// ahead of it (`ahead`: its backlog plus the gateway's unreported dispatches) and the requests
// running there (`running`: their decode steps share every tick of its prefill). The agent's beat
// gives a physical cost model (gateway/routing.h); what it leaves out — tokenizing the whole
// prompt, the HTTP hop, ticks shared with decoding streams, cores shared with other processes —
// shows up in the measurements. The fit is a ridge regression with exponential forgetting,
//   ttft ≈ fixed + per_uncached · uncached + per_ahead · ahead + per_running · running,
// pulled toward the physical model's coefficients (the prior) so that a feature that has not
// varied yet keeps the prior's slope; the token slopes never fall below a quarter of the prior's (a
// cold prompt must never look cheap), nothing below 0. The bounds are constraints of the solve (a
// coefficient at its bound, the others solved again without it), not clamps after it: features
// that move together (one request at a time: `running` is always 1) would otherwise keep an offset
// that the clamped one no longer cancels.
//
// Each sample is weighted by 1 / measured: TTFTs span three orders of magnitude (a cache hit's
// 50 ms, a cold prompt's seconds) and routing compares them relatively, so the fit minimises the
// relative error; unweighted, the few cold prompts' seconds set the fixed cost and every hit was
// over-predicted (median +16% on the CPU cluster benchmark, where the weighting halves the
// median error's excess over the noise; docs/BENCHMARKS.md).
//
// Pure and single-threaded: the gateway keeps one per agent on its I/O thread; tests feed it
// synthetic samples.
#pragma once

#include <array>
#include <cstddef>

namespace uma::gateway {

struct TtftCoefficients {
  double fixed_s = 0.0;         // per request
  double per_uncached_s = 0.0;  // per prompt token the agent computes
  double per_ahead_s = 0.0;     // per prompt token ahead of it
  double per_running_s = 0.0;   // per request running there when it arrives
  double predict(double uncached, double ahead, double running = 0.0) const {
    return fixed_s + per_uncached_s * uncached + per_ahead_s * ahead + per_running_s * running;
  }
};

class TtftFit {
 public:
  // `forget`: each sample's weight decays by this per newer sample (0.97: about the last 30
  // count). `prior_weight`: how many (unit-weight) samples' worth the prior is.
  explicit TtftFit(double forget = 0.97, double prior_weight = 0.1) : forget_(forget), prior_weight_(prior_weight) {}

  void observe(double uncached, double ahead, double running, double measured_s);
  std::size_t samples() const { return samples_; }
  // The fitted coefficients given the physical model's (the prior alone before any sample).
  TtftCoefficients coefficients(const TtftCoefficients& prior) const;

 private:
  static constexpr std::size_t kFeatures = 4;  // 1, uncached, ahead, running
  static constexpr double kScale = 1000.0;     // tokens per feature unit, so that the features are alike
  double forget_, prior_weight_;
  std::array<std::array<double, kFeatures>, kFeatures> xtx_{};  // decayed sum of w·x·xᵀ
  std::array<double, kFeatures> xty_{};                         // decayed sum of w·x·y
  std::size_t samples_ = 0;
};

}  // namespace uma::gateway
