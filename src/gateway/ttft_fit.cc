#include "gateway/ttft_fit.h"

#include <algorithm>
#include <cmath>

namespace uma::gateway {

void TtftFit::observe(double uncached, double ahead, double running, double measured_s) {
  if (!(measured_s >= 0.0) || !std::isfinite(measured_s)) return;
  // Relative error: a sample counts 1 / measured (a millisecond at least, so a freak 0 cannot
  // outweigh the rest).
  const double w = 1.0 / std::max(measured_s, 1e-3);
  const std::array<double, kFeatures> x = {1.0, std::max(0.0, uncached) / kScale, std::max(0.0, ahead) / kScale,
                                           std::max(0.0, running)};
  for (std::size_t i = 0; i < kFeatures; ++i) {
    for (std::size_t j = 0; j < kFeatures; ++j) xtx_[i][j] = forget_ * xtx_[i][j] + w * x[i] * x[j];
    xty_[i] = forget_ * xty_[i] + w * x[i] * measured_s;
  }
  ++samples_;
}

TtftCoefficients TtftFit::coefficients(const TtftCoefficients& prior) const {
  if (samples_ == 0) return prior;
  // (XᵀWX + λI) θ = XᵀWy + λ θ₀, in feature units (seconds per kScale tokens for the token slopes),
  // subject to θ ≥ the bounds. A coefficient below its bound is pinned there and the others are
  // solved again (an active set), never clamped after the solve: the features can be nearly
  // collinear (one agent at one request a time: `running` is 1 in every sample but the first),
  // and clamping one of two that share the same samples dropped what the other had offset. That
  // left a fixed cost of -1.0 s raised to 0 beside a running cost of +1.06 s, and every cache hit
  // of ~340 ms was predicted at 0.7-1.4 s. A pinned coefficient stays pinned: at most four solves.
  const std::array<double, kFeatures> theta0 = {prior.fixed_s, prior.per_uncached_s * kScale, prior.per_ahead_s * kScale,
                                                prior.per_running_s};
  const std::array<double, kFeatures> lower = {0.0, 0.25 * theta0[1], 0.25 * theta0[2], 0.0};
  std::array<bool, kFeatures> pinned{};
  std::array<double, kFeatures> theta = lower;
  for (std::size_t round = 0; round < kFeatures; ++round) {
    // The system over the free coefficients, the pinned ones moved to the right-hand side.
    std::array<std::size_t, kFeatures> idx{};
    std::size_t n = 0;
    for (std::size_t i = 0; i < kFeatures; ++i) {
      if (!pinned[i]) idx[n++] = i;
    }
    if (n == 0) break;
    double a[kFeatures][kFeatures + 1];
    for (std::size_t r = 0; r < n; ++r) {
      const std::size_t i = idx[r];
      // The slopes are pulled toward the prior; the fixed cost is not (every sample measures it).
      const double lambda = i == 0 ? 0.0 : prior_weight_;
      for (std::size_t c = 0; c < n; ++c) a[r][c] = xtx_[i][idx[c]] + (r == c ? lambda : 0.0);
      a[r][n] = xty_[i] + lambda * theta0[i];
      for (std::size_t k = 0; k < kFeatures; ++k) {
        if (pinned[k]) a[r][n] -= xtx_[i][k] * lower[k];
      }
    }
    // Gauss-Jordan with partial pivoting; the ridge terms and the intercept's column (1 in every
    // sample) keep the matrix positive definite.
    for (std::size_t col = 0; col < n; ++col) {
      std::size_t pivot = col;
      for (std::size_t r = col + 1; r < n; ++r) {
        if (std::abs(a[r][col]) > std::abs(a[pivot][col])) pivot = r;
      }
      for (std::size_t k = 0; k <= n; ++k) std::swap(a[col][k], a[pivot][k]);
      for (std::size_t r = 0; r < n; ++r) {
        if (r == col) continue;
        const double f = a[r][col] / a[col][col];
        for (std::size_t k = col; k <= n; ++k) a[r][k] -= f * a[col][k];
      }
    }
    std::size_t worst = kFeatures;
    for (std::size_t r = 0; r < n; ++r) {
      const std::size_t i = idx[r];
      theta[i] = a[r][n] / a[r][r];
      if (!(theta[i] >= lower[i]) && (worst == kFeatures || theta[i] - lower[i] < theta[worst] - lower[worst])) worst = i;
    }
    if (worst == kFeatures) break;
    pinned[worst] = true;  // the furthest below its bound; the rest are solved again without it
    theta[worst] = lower[worst];
  }
  TtftCoefficients c;
  c.fixed_s = std::max(lower[0], theta[0]);
  c.per_uncached_s = std::max(lower[1], theta[1]) / kScale;
  c.per_ahead_s = std::max(lower[2], theta[2]) / kScale;
  c.per_running_s = std::max(lower[3], theta[3]);
  return c;
}

}  // namespace uma::gateway
