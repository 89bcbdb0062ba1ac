// TickCost: a tick's time predicted from what it moves and what it computes (bytes moved and FLOPs computed, each at its measured rate).
//
//   bytes = the weights, once per tick (every row of a batch shares one pass)
//         + the KV read (once per sequence in the tick) and written (one cell per token)
//         + activations (a few n_embd vectors per token and layer)
//   dense flops     = 2 * params per token (prompt tokens and decode rows apart)
//   attention flops = 4 * n_layer * n_embd per token and cell it spans
//   ms    = c0 + c_bytes * bytes + c_prompt * prompt dense + c_row * row dense + c_attention * attention
// c_bytes is the inverse of the bandwidth a tick sees, c_dense and c_attention of the compute rates
// of the weight products and of attention (not the same: on a CPU a decode row's attention over
// a deep unified KV runs far below the matrix rate), c0 what is fixed per tick (a GPU's launches). The three are fitted to measured ticks by least squares that
// forgets old ones (a machine shared with others drifts), each kept non-negative; the prompt chunks
// the scheduler times at start (Scheduler::calibrate) and a one-token decode are its first
// samples, a first guess the serving ticks replace once kWarmSamples of them are measured (a
// calibration taken while a neighbour was busy must not plan the next minute); no one tick moves
// a warm fit by more than kSampleBound. The median relative error over the last ticks is reported (metrics): the policy that
// fills a tick (policy.h slo_prefill_budget) is only as good as this prediction.
//
// Not thread-safe; owned by the scheduler. Pure arithmetic: tested on synthetic ticks.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>

namespace uma {

// What the cost of a token depends on; all zero for a decoder that cannot say (then the model
// falls back to counting tokens: no bytes, one flop per token).
struct ModelShape {
  double weight_bytes = 0;        // the weights a tick reads
  double params = 0;              // parameters (2 flops each per token)
  double n_layer = 0;
  double n_embd = 0;
  double kv_bytes_per_cell = 0;   // K and V of one token, every layer
};

// One tick's work: `tokens` rows whose attention spans `span_cells` cells in all (the sum over
// rows: a decode row spans its sequence's depth, or the whole pool with a unified KV; a prompt
// chunk of n tokens from depth d spans n*d + n*(n+1)/2). `decode_rows` of the tokens are single
// decode rows: their weight products run as thin matrices, at a rate of their own (on a CPU a
// row costs several prompt tokens).
// `kv_read_cells`: the cells whose K and V the tick reads, once per sequence it touches (a prompt
// chunk reads its sequence's cells once whatever its length, so at depth a large chunk costs far
// less per token than a small one: on a small CPU a 2000-token prompt in 40-token chunks cost
// 2.5x its cost in 512-token ones).
struct TickWork {
  double tokens = 0;
  double span_cells = 0;
  double decode_rows = 0;
  double kv_read_cells = 0;
};

class TickCost {
 public:
  explicit TickCost(const ModelShape& shape) : shape_(shape) {}

  static constexpr int kFeatures = 5;
  using Vector = std::array<double, kFeatures>;
  using Matrix = std::array<Vector, kFeatures>;

  double bytes(const TickWork& w) const;
  double flops(const TickWork& w) const;  // dense + attention
  double dense_flops(const TickWork& w) const;
  double attention_flops(const TickWork& w) const;
  // Predicted milliseconds; 0 until fitted (warm()).
  double predict_ms(const TickWork& w) const;
  // A measured tick: refits, and (once warm) records the prediction's relative error first.
  // first_guess: a calibration's chunk, timed before serving; such samples count until
  // kWarmSamples serving ticks were measured, then only those do.
  void observe(const TickWork& w, double ms, bool first_guess = false);
  bool warm() const { return samples_ >= kWarmSamples; }
  // Median of |predicted - measured| / measured over the last kErrorWindow warm ticks (0: none yet).
  double median_error() const;
  const ModelShape& shape() const { return shape_; }
  // Fitted coefficients: ms fixed, ms per GB, ms per dense GFLOP of prompt tokens and of decode
  // rows, ms per attention GFLOP.
  Vector coefficients() const { return coef_; }

  static constexpr std::size_t kWarmSamples = 6;
  static constexpr std::size_t kErrorWindow = 64;
  static constexpr double kSampleBound = 4.0;  // a warm model fits a tick as at most this far off its prediction

 private:
  Vector features(const TickWork& w) const;
  void refit();

  ModelShape shape_;
  Matrix xtx_{};  // decayed sums for least squares
  Vector xty_{};
  Matrix guess_xtx_{};  // the same, of the first-guess samples
  Vector guess_xty_{};
  std::size_t measured_ = 0;  // serving ticks observed
  Vector coef_{};
  std::size_t samples_ = 0;
  std::deque<double> errors_;
};

}  // namespace uma
