#include "cluster/ttft_fit.h"

#include <algorithm>
#include <cmath>

namespace uma::cluster {

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
  // (XᵀWX + λI) θ = XᵀWy + λ θ₀, in feature units (seconds per kScale tokens for the token slopes).
  const std::array<double, kFeatures> theta0 = {prior.fixed_s, prior.per_uncached_s * kScale, prior.per_ahead_s * kScale,
                                                prior.per_running_s};
  double a[kFeatures][kFeatures + 1];
  for (std::size_t i = 0; i < kFeatures; ++i) {
    // The slopes are pulled toward the prior; the fixed cost is not (every sample measures it).
    const double lambda = i == 0 ? 0.0 : prior_weight_;
    for (std::size_t j = 0; j < kFeatures; ++j) a[i][j] = xtx_[i][j] + (i == j ? lambda : 0.0);
    a[i][kFeatures] = xty_[i] + lambda * theta0[i];
  }
  // Gauss-Jordan with partial pivoting; the ridge terms and the intercept's column (1 in every
  // sample) keep the matrix positive definite.
  for (std::size_t col = 0; col < kFeatures; ++col) {
    std::size_t pivot = col;
    for (std::size_t r = col + 1; r < kFeatures; ++r) {
      if (std::abs(a[r][col]) > std::abs(a[pivot][col])) pivot = r;
    }
    for (std::size_t k = 0; k <= kFeatures; ++k) std::swap(a[col][k], a[pivot][k]);
    for (std::size_t r = 0; r < kFeatures; ++r) {
      if (r == col) continue;
      const double f = a[r][col] / a[col][col];
      for (std::size_t k = col; k <= kFeatures; ++k) a[r][k] -= f * a[col][k];
    }
  }
  const auto solved = [&](std::size_t i) { return a[i][kFeatures] / a[i][i]; };
  TtftCoefficients c;
  c.fixed_s = std::max(0.0, solved(0));
  c.per_uncached_s = std::max(0.25 * prior.per_uncached_s, solved(1) / kScale);
  c.per_ahead_s = std::max(0.25 * prior.per_ahead_s, solved(2) / kScale);
  c.per_running_s = std::max(0.0, solved(3));
  return c;
}

}  // namespace uma::cluster
