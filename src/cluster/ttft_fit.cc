#include "cluster/ttft_fit.h"

#include <algorithm>
#include <cmath>

namespace uma::cluster {

void TtftFit::observe(double uncached, double ahead, double measured_s) {
  if (!(measured_s >= 0.0) || !std::isfinite(measured_s)) return;
  const std::array<double, 3> x = {1.0, std::max(0.0, uncached) / kScale, std::max(0.0, ahead) / kScale};
  for (std::size_t i = 0; i < 3; ++i) {
    for (std::size_t j = 0; j < 3; ++j) xtx_[i][j] = forget_ * xtx_[i][j] + x[i] * x[j];
    xty_[i] = forget_ * xty_[i] + x[i] * measured_s;
  }
  ++samples_;
}

TtftCoefficients TtftFit::coefficients(const TtftCoefficients& prior) const {
  if (samples_ == 0) return prior;
  // (XᵀX + wI) θ = Xᵀy + w θ₀, in feature units (seconds per kScale tokens for the slopes).
  const std::array<double, 3> theta0 = {prior.fixed_s, prior.per_uncached_s * kScale, prior.per_ahead_s * kScale};
  double a[3][4];
  for (std::size_t i = 0; i < 3; ++i) {
    for (std::size_t j = 0; j < 3; ++j) a[i][j] = xtx_[i][j] + (i == j ? prior_weight_ : 0.0);
    a[i][3] = xty_[i] + prior_weight_ * theta0[i];
  }
  // Gaussian elimination with partial pivoting; the ridge term keeps the matrix positive definite.
  for (std::size_t col = 0; col < 3; ++col) {
    std::size_t pivot = col;
    for (std::size_t r = col + 1; r < 3; ++r) {
      if (std::abs(a[r][col]) > std::abs(a[pivot][col])) pivot = r;
    }
    for (std::size_t k = 0; k < 4; ++k) std::swap(a[col][k], a[pivot][k]);
    for (std::size_t r = 0; r < 3; ++r) {
      if (r == col) continue;
      const double f = a[r][col] / a[col][col];
      for (std::size_t k = col; k < 4; ++k) a[r][k] -= f * a[col][k];
    }
  }
  TtftCoefficients c;
  c.fixed_s = std::max(0.0, a[0][3] / a[0][0]);
  c.per_uncached_s = std::max(0.25 * prior.per_uncached_s, a[1][3] / a[1][1] / kScale);
  c.per_ahead_s = std::max(0.25 * prior.per_ahead_s, a[2][3] / a[2][2] / kScale);
  return c;
}

}  // namespace uma::cluster
