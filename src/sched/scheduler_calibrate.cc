// The calibration (scheduler.h, begin_calibration): the cost model's first samples and the
// measured prefill floor, one timed chunk per step.
#include <algorithm>
#include <array>

#include "sched/scheduler.h"

#include <spdlog/spdlog.h>

namespace uma {

namespace {
constexpr std::size_t kDepthChunks = 4;  // appended at depth: 1/16, 1/8, 1/4 and 1/2 of the fill
}  // namespace

Status Scheduler::begin_calibration(double most_ms) {
  if (!sessions_.empty() || calibrating() || ledger_.ids().empty()) {
    return Status(ErrorCode::kInternal, "calibration runs before the first request");
  }
  Calibration c;
  if (Status st = decoder_.tokenize("Calibration: the quick brown fox jumps over the lazy dog.", c.text); !st.ok()) return st;
  if (c.text.empty()) return Status::Ok();
  c.most_ms = most_ms;
  c.big = std::max(TickBudget::kMinSample, std::min({decoder_.n_batch(), 256, decoder_.n_ctx_seq() - 1}));
  c.seq = ledger_.ids().take();
  calibration_ = std::move(c);
  return Status::Ok();
}

Status Scheduler::calibrate(double most_ms) {
  Status st = begin_calibration(most_ms);
  while (st.ok() && calibrating()) st = calibrate_step();
  return st;
}

double Scheduler::timed_chunk(Calibration& c, std::int32_t n, Status& st) {
  std::vector<BatchEntry> batch;
  batch.reserve(static_cast<std::size_t>(n));
  for (std::int32_t i = 0; i < n; ++i) batch.push_back({c.text[static_cast<std::size_t>(i) % c.text.size()], c.at + i, c.seq, false});
  const Clock::time_point t0 = time_.now();
  st = decoder_.decode(batch);
  const double ms = ms_between(t0, time_.now());
  c.spent_ms += ms;
  if (!st.ok()) return -1.0;
  c.at += n;
  return ms;
}

namespace {

// The smallest chunk size whose cost per token is within `slack` of the best (0 for none).
std::int32_t knee_of(const std::map<std::int32_t, double>& per_token, double slack) {
  double best = 1e300;
  for (const auto& [size, ms_per] : per_token) best = std::min(best, ms_per);
  for (const auto& [size, ms_per] : per_token) {  // ascending sizes: the first near the best
    if (ms_per <= slack * best) return size;
  }
  return 0;
}

}  // namespace

Status Scheduler::calibrate_step() {
  if (!calibrating()) return Status::Ok();
  Calibration& c = *calibration_;
  using Phase = Calibration::Phase;
  const auto part = [&c](std::int32_t d) { return std::max(TickBudget::kMinSample, c.big / d); };
  Status st;
  auto open = [&] {
    if (st = decoder_.start_sequence(c.seq, SamplingParams{}); st.ok()) c.open = true;
    c.at = 0;
    return st.ok();
  };
  auto close = [&] {
    decoder_.end_sequence(c.seq);
    c.open = false;
  };
  auto fail = [&] {
    spdlog::warn("calibration: {} (the cost model learns from the first requests)", st.to_string());
    end_calibration("failed");
    return st;
  };
  switch (c.phase) {
    case Phase::kWarmUp:
    case Phase::kMeasured: {
      // A chunk on an empty sequence, then a one-token decode step: the cost model's two ends.
      const std::int32_t n = part(4);
      if (!open()) return fail();
      const double ms = timed_chunk(c, n, st);
      const double step_ms = ms >= 0 && n < decoder_.n_ctx_seq() ? timed_chunk(c, 1, st) : -1.0;
      close();
      if (!st.ok()) return fail();
      if (c.phase == Phase::kWarmUp) {
        c.phase = Phase::kMeasured;
        return st;
      }
      budget_.observe_prefill(ms, n);
      cost_.observe({double(n), span_of(0, n)}, ms, /*first_guess=*/true);
      if (step_ms > 0) cost_.observe({1.0, span_of(n, 1), 1.0, kv_read_of(n)}, step_ms, /*first_guess=*/true);
      std::int32_t depth = c.big;
      for (std::size_t k = 0; k < kDepthChunks; ++k) depth += part(16 >> k);
      if (c.spent_ms >= c.most_ms || depth >= decoder_.n_ctx_seq()) {
        end_calibration(c.spent_ms >= c.most_ms ? "ended at its time bound" : "done (no room to measure at depth)");
        return st;
      }
      c.phase = Phase::kFill;
      return st;
    }
    case Phase::kFill:
    case Phase::kAtDepth: {
      // The prefill floor: a sequence filled to `big`, then chunks of growing size appended, so
      // they run at depth as in serving; the smallest near the best per-token rate is the knee (on
      // a small CPU, chunks under 64 tokens ran 5x slower per token over a deep KV). The fill is
      // one chunk: the largest step, and so what the first request may wait behind.
      if (!c.open && !open()) return fail();
      const bool fill = c.phase == Phase::kFill;
      const std::int32_t from = c.at;
      const std::int32_t n = fill ? c.big : part(16 >> c.sized);
      const double ms = timed_chunk(c, n, st);
      if (ms < 0) return fail();
      // Sizes that spread: the tick budget's fit tells a tick's fixed cost from its per-token cost.
      budget_.observe_prefill(ms, n);
      cost_.observe({double(n), span_of(from, n), 0.0, kv_read_of(from)}, ms, /*first_guess=*/true);
      if (fill) {
        c.phase = Phase::kAtDepth;
        return st;
      }
      c.per_token[n] = ms / n;
      spdlog::debug("calibration: {} tokens at depth {}: {:.3f} ms per token", n, from, ms / n);
      if (++c.sized < kDepthChunks) return st;
      prefill_knee_ = knee_of(c.per_token, kKneeSlack);
      end_calibration("done");
      return st;
    }
  }
  return st;
}

void Scheduler::end_calibration(const char* outcome) {
  if (!calibrating()) return;
  Calibration& c = *calibration_;
  if (c.open) decoder_.end_sequence(c.seq);
  ledger_.ids().give_back(c.seq);
  metrics_.prefill_fixed_ms = budget_.prefill_fixed_ms();
  metrics_.prefill_ms_per_token = budget_.ms_per_prefill_token();
  const auto k = cost_.coefficients();  // ms, ms per GB, ms per GFLOP (dense, attention)
  auto rate = [](double ms_per_giga) { return ms_per_giga > 0 ? 1e3 / ms_per_giga : 0.0; };
  spdlog::info("calibration {} after {:.0f} ms of decoding: {:.3f} ms per prompt token, {:.2f} ms fixed per tick; cost "
               "model {:.2f} ms + {:.1f} GB/s + {:.0f} GFLOP/s prompt + {:.0f} GFLOP/s decode rows + {:.0f} GFLOP/s "
               "attention (0: not told apart yet); prefill floor {} tokens (0: not measured)",
               outcome, c.spent_ms, budget_.ms_per_prefill_token(), budget_.prefill_fixed_ms(), k[0], rate(k[1]), rate(k[2]),
               rate(k[3]), rate(k[4]), prefill_knee_);
  calibration_.reset();
}

}  // namespace uma
