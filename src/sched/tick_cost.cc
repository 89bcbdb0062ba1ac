#include "sched/tick_cost.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace uma {
namespace {

constexpr double kKeep = 0.98;  // each older tick weighs 2% less: about the last 50 ticks count
constexpr double kGiga = 1e9;

// Solves the normal equations restricted to the variables in `mask` (others 0); false when singular.
bool solve(const TickCost::Matrix& a, const TickCost::Vector& b, unsigned mask, TickCost::Vector& x) {
  std::vector<int> idx;
  for (int i = 0; i < TickCost::kFeatures; ++i) {
    if (mask & (1u << i)) idx.push_back(i);
  }
  const std::size_t n = idx.size();
  std::array<std::array<double, TickCost::kFeatures + 1>, TickCost::kFeatures> m{};
  for (std::size_t r = 0; r < n; ++r) {
    for (std::size_t c = 0; c < n; ++c) m[r][c] = a[idx[r]][idx[c]];
    m[r][n] = b[idx[r]];
  }
  for (std::size_t c = 0; c < n; ++c) {
    std::size_t p = c;
    for (std::size_t r = c + 1; r < n; ++r) {
      if (std::abs(m[r][c]) > std::abs(m[p][c])) p = r;
    }
    if (std::abs(m[p][c]) < 1e-12 * (1.0 + std::abs(a[idx[c]][idx[c]]))) return false;
    std::swap(m[p], m[c]);
    for (std::size_t r = 0; r < n; ++r) {
      if (r == c) continue;
      const double f = m[r][c] / m[c][c];
      for (std::size_t k = c; k <= n; ++k) m[r][k] -= f * m[c][k];
    }
  }
  x = {};
  for (std::size_t r = 0; r < n; ++r) x[idx[r]] = m[r][n] / m[r][r];
  return true;
}

}  // namespace

TickCost::Vector TickCost::features(const TickWork& w) const {
  // GB and GFLOP keep the sums well conditioned; without a shape, the dense part counts tokens.
  const double rows = std::clamp(w.decode_rows, 0.0, w.tokens);
  if (shape_.params <= 0) return {1.0, 0.0, w.tokens - rows, rows, 0.0};
  const double per_token = 2.0 * shape_.params / kGiga;
  return {1.0, bytes(w) / kGiga, (w.tokens - rows) * per_token, rows * per_token, attention_flops(w) / kGiga};
}

double TickCost::bytes(const TickWork& w) const {
  if (shape_.weight_bytes <= 0) return 0.0;
  const double kv = shape_.kv_bytes_per_cell * (w.kv_read_cells + w.tokens);
  const double activations = w.tokens * shape_.n_layer * shape_.n_embd * 4.0 * 4.0;  // ~4 f32 vectors per layer
  return shape_.weight_bytes + kv + activations;
}

double TickCost::dense_flops(const TickWork& w) const { return 2.0 * shape_.params * w.tokens; }
double TickCost::attention_flops(const TickWork& w) const { return 4.0 * shape_.n_layer * shape_.n_embd * w.span_cells; }
double TickCost::flops(const TickWork& w) const {
  if (shape_.params <= 0) return w.tokens;
  return dense_flops(w) + attention_flops(w);
}

double TickCost::predict_ms(const TickWork& w) const {
  if (!warm()) return 0.0;
  const Vector f = features(w);
  double ms = 0.0;
  for (int i = 0; i < kFeatures; ++i) ms += coef_[i] * f[i];
  return ms;
}

void TickCost::observe(const TickWork& w, double ms, bool first_guess) {
  if (!(ms > 0) || w.tokens <= 0) return;
  if (warm()) {
    const double p = predict_ms(w);
    if (!first_guess) {
      errors_.push_back(std::abs(p - ms) / ms);
      if (errors_.size() > kErrorWindow) errors_.pop_front();
    }
    // One tick moves the fit as one within kSampleBound of the prediction would: a neighbour's
    // burst (or a page fault) is a few ticks' noise, while a machine that changes for good still
    // moves it by up to that factor a tick.
    // (Not against a first guess: the ticks that replace it are what it got wrong.)
    if (p > 0 && measured_ >= kWarmSamples) ms = std::clamp(ms, p / kSampleBound, p * kSampleBound);
  }
  const Vector f = features(w);
  Matrix& xtx = first_guess ? guess_xtx_ : xtx_;
  Vector& xty = first_guess ? guess_xty_ : xty_;
  for (int r = 0; r < kFeatures; ++r) {
    for (int c = 0; c < kFeatures; ++c) xtx[r][c] = kKeep * xtx[r][c] + f[r] * f[c];
    xty[r] = kKeep * xty[r] + f[r] * ms;
  }
  if (!first_guess && ++measured_ == kWarmSamples) guess_xtx_ = {}, guess_xty_ = {};  // measured ticks enough: the guess goes
  ++samples_;
  refit();
}

void TickCost::refit() {
  Matrix a = xtx_;
  Vector b = xty_;
  for (int r = 0; r < kFeatures; ++r) {
    for (int c = 0; c < kFeatures; ++c) a[r][c] += guess_xtx_[r][c];
    b[r] += guess_xty_[r];
  }
  double trace = 0.0;
  for (int i = 0; i < kFeatures; ++i) trace += a[i][i];
  for (int i = 0; i < kFeatures; ++i) a[i][i] += 1e-9 * trace;
  double best = std::numeric_limits<double>::infinity();
  Vector pick = coef_;
  for (unsigned mask = 1; mask < (1u << kFeatures); ++mask) {
    Vector x{};
    if (!solve(a, b, mask, x)) continue;
    if (std::any_of(x.begin(), x.end(), [](double v) { return v < 0; })) continue;
    // Residual up to a constant: c'Ac - 2c'b.
    double quad = 0, lin = 0;
    for (int r = 0; r < kFeatures; ++r) {
      lin += x[r] * b[r];
      for (int c = 0; c < kFeatures; ++c) quad += x[r] * a[r][c] * x[c];
    }
    const double sse = quad - 2 * lin;
    if (sse < best) best = sse, pick = x;
  }
  coef_ = pick;
}

double TickCost::median_error() const {
  if (errors_.empty()) return 0.0;
  std::vector<double> e(errors_.begin(), errors_.end());
  std::nth_element(e.begin(), e.begin() + static_cast<std::ptrdiff_t>(e.size() / 2), e.end());
  return e[e.size() / 2];
}

}  // namespace uma
