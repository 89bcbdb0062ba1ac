// The scheduler's cost model and SLO budget (tick_cost.h, policy.h slo_prefill_budget): what a
// tick is predicted to cost, what it cost, and how many prompt tokens the next one carries.
#include <algorithm>
#include <array>
#include <map>

#include "sched/scheduler.h"

#include <spdlog/spdlog.h>

namespace uma {

double Scheduler::span_of(std::int32_t pos, std::int32_t n) const {
  // Unified KV: every row attends over the pool's cells in use; per sequence, over its own.
  if (!ledger_.per_seq()) return n * (unified_span_ + 0.5 * n);
  return static_cast<double>(n) * pos + 0.5 * n * (n + 1.0);
}

double Scheduler::kv_read_of(std::int32_t pos) const {
  // Per sequence: its cells, once for the tick. Unified: the pool's, counted once by the caller.
  return ledger_.per_seq() ? static_cast<double>(pos) : 0.0;
}

TickWork Scheduler::empty_work() const {
  TickWork w;
  w.kv_read_cells = ledger_.per_seq() ? 0.0 : unified_span_;  // a unified pool is read once a tick
  return w;
}

void Scheduler::add_decode_row(TickWork& w, const Session& s) const {
  w.tokens += 1;
  w.decode_rows += 1;
  w.span_cells += span_of(s.n_past, 1);
  w.kv_read_cells += kv_read_of(s.n_past);
}

double Scheduler::gather_window_ms() const {
  if (config_.gather_max_ms <= 0.0 || inflight_ || !cost_.warm()) return 0.0;
  std::int64_t prompt = 0;
  for (const auto& s : sessions_) {
    if (s->state == SessionState::kDecode) return 0.0;
    if (s->state == SessionState::kQueued || s->state == SessionState::kPrefill) prompt += s->prompt_remaining();
  }
  if (prompt == 0) return 0.0;
  const double n = static_cast<double>(std::min<std::int64_t>(prompt, decoder_.n_batch()));
  TickWork w;
  w.tokens = n;
  w.span_cells = n * (n + 1) / 2;
  return uma::gather_window_ms(false, cost_.predict_ms(w), config_.gather_max_ms);
}

TickWork Scheduler::batch_work() const {
  TickWork w;
  w.tokens = static_cast<double>(batch_.entries.size());
  w.decode_rows = static_cast<double>(batch_.decode_rows());  // a dropped row's attention is left out
  w.kv_read_cells = ledger_.per_seq() ? 0.0 : unified_span_;
  for (const Session* s : batch_.decoded) {
    w.span_cells += span_of(s->n_past, 1 + static_cast<std::int32_t>(s->draft.size()));  // its row and its drafts'
    w.kv_read_cells += kv_read_of(s->n_past);
  }
  for (const PrefillChunk& c : batch_.prefilled) {
    w.span_cells += span_of(c.session->n_prefilled, c.length);
    w.kv_read_cells += kv_read_of(c.session->n_prefilled);
  }
  return w;
}

double Scheduler::solo_prefill_ms(const Session& s) const {
  const std::int32_t n = s.prompt_remaining();
  return cost_.predict_ms({static_cast<double>(n), span_of(s.n_prefilled, n), 0.0,
                           kv_read_of(s.n_prefilled) + (ledger_.per_seq() ? 0.0 : unified_span_)});
}

double Scheduler::ttft_target(Session& s) {
  if (s.ttft_target_ms > 0 || !cost_.warm()) return s.ttft_target_ms > 0 ? s.ttft_target_ms : s.slo_ttft_ms;
  // What no schedule can beat: its own prefill after the prompts that arrived before it and are
  // still going in (background ones only count for background work: interactive work overtakes
  // them). Without those, a burst of prompts would hold every one to a lone prompt's target, and
  // the streams would stall for prefill that cannot meet it anyway.
  double ahead = 0.0;
  for (const auto& other : sessions_) {
    const Session& o = *other;
    if (&o == &s || o.ttft_target_ms <= 0 || o.follow != 0 || !is_active(o)) continue;
    if (o.state == SessionState::kDecode || o.prompt_remaining() == 0) continue;
    if (o.background() && !s.background()) continue;
    ahead += solo_prefill_ms(o);
  }
  s.ttft_target_ms = s.slo_ttft_ms + config_.ttft_solo_factor * (solo_prefill_ms(s) + ahead);
  spdlog::debug("session {}: TTFT target {:.0f} ms ({:.0f} ms of prompts ahead)", s.id, s.ttft_target_ms, ahead);
  return s.ttft_target_ms;
}

std::int32_t Scheduler::prefill_floor() const {
  std::int32_t floor = config_.measured_prefill_floor ? std::max(config_.min_prefill, prefill_knee_) : config_.min_prefill;
  // A long prompt goes in in at most prompt_chunks_max chunks: each chunk reads its sequence's KV
  // once, so at depth small chunks cost several times as much per token (tick_cost.h).
  if (config_.prompt_chunks_max > 0) {
    const std::vector<std::size_t> prompts = prefill_order(candidates_);
    if (!prompts.empty()) {
      const std::int32_t n = order_[prompts.front()]->n_prompt;
      floor = std::max(floor, (n + config_.prompt_chunks_max - 1) / config_.prompt_chunks_max);
    }
  }
  return std::min(floor, decoder_.n_ubatch());
}

std::int32_t Scheduler::slo_budget(Clock::time_point now, std::int32_t capacity) {
  if (!config_.slo_prefill || !cost_.warm()) return -1;
  TickWork decode = empty_work();
  double waited = 0.0, tbt = 0.0;
  for (std::size_t i = 0; i < order_.size(); ++i) {
    const Session& s = *order_[i];
    if (!candidates_[i].decoding) continue;
    add_decode_row(decode, s);
    if (s.background()) continue;  // background streams take the gap
    waited = std::max(waited, ms_between(s.last_emit_at, now));
    tbt = tbt > 0 ? std::min(tbt, s.slo_tbt_ms) : s.slo_tbt_ms;
  }
  const std::vector<std::size_t> prompts = prefill_order(candidates_);
  if (prompts.empty()) return 0;
  std::vector<PromptWait> waits;
  waits.reserve(prompts.size());
  for (std::size_t i : prompts) {
    Session& s = *order_[i];
    waits.push_back({ms_between(s.received_at, now), candidates_[i].prompt_remaining, ttft_target(s)});
  }
  auto tick_ms = [&](std::int32_t p) {
    TickWork w = decode;
    for (std::size_t k = 0; k < prompts.size() && p > 0; ++k) {
      const std::int32_t n = std::min(p, waits[k].remaining);
      w.tokens += n;
      w.span_cells += span_of(order_[prompts[k]]->n_prefilled, n);
      w.kv_read_cells += kv_read_of(order_[prompts[k]]->n_prefilled);
      p -= n;
    }
    return cost_.predict_ms(w);
  };
  SloBudgetInput in{tick_ms, waited, tbt, waits, std::max(prefill_floor(), 1), capacity};
  const SloBudget b = slo_prefill_budget(in);
  metrics_.slo_stream_ratio = b.stream_ratio;
  metrics_.slo_prompt_ratio = b.prompt_ratio;
  return b.tokens;
}

void Scheduler::observe_cost(double decode_ms) {
  const TickWork w = batch_work();
  if (w.tokens <= 0) return;
  metrics_.tick_predicted_ms = cost_.predict_ms(w);
  observe_spec_overhead(decode_ms - metrics_.tick_predicted_ms);
  cost_.observe(w, decode_ms);
  metrics_.tick_predict_error = cost_.median_error();
  // Each row's share: the weights split over the tick's tokens, plus its own KV read and write.
  const double shared = cost_.bytes({w.tokens, 0}) - cost_.bytes({0, 0});
  const double weights_per_token = cost_.bytes({0, 0}) / w.tokens + shared / w.tokens;
  const double kv = cost_.shape().kv_bytes_per_cell;
  for (Session* s : batch_.decoded) s->bytes_moved += weights_per_token + kv * (kv_read_of(s->n_past) + 1);
  for (const PrefillChunk& c : batch_.prefilled) {
    c.session->bytes_moved += weights_per_token * c.length + kv * (kv_read_of(c.session->n_prefilled) + c.length);
  }
}

Status Scheduler::calibrate(double most_ms) {
  if (!sessions_.empty() || ledger_.ids().empty()) {
    return Status(ErrorCode::kInternal, "calibrate runs before the first request");
  }
  std::vector<Token> text;
  if (Status st = decoder_.tokenize("Calibration: the quick brown fox jumps over the lazy dog.", text); !st.ok()) return st;
  if (text.empty()) return Status::Ok();
  // A chunk on an empty sequence, followed by a one-token decode step (the cost model's two
  // ends); the first round only warms up.
  const std::int32_t big = std::max(TickBudget::kMinSample, std::min({decoder_.n_batch(), 256, decoder_.n_ctx_seq() - 1}));
  const auto part = [big](std::int32_t d) { return std::max(TickBudget::kMinSample, big / d); };
  const std::array<std::int32_t, 2> chunks = {part(4), part(4)};
  const std::int32_t seq = ledger_.ids().take();
  std::vector<BatchEntry> batch;
  double spent_ms = 0.0;
  Status result = Status::Ok();
  // Decodes `n` prompt tokens of `seq` from position `at`; the time, or a negative one on failure.
  auto timed_chunk = [&](std::int32_t at, std::int32_t n) {
    batch.clear();
    for (std::int32_t i = 0; i < n; ++i) batch.push_back({text[static_cast<std::size_t>(i) % text.size()], at + i, seq, false});
    const Clock::time_point t0 = time_.now();
    result = decoder_.decode(batch);
    const double ms = ms_between(t0, time_.now());
    spent_ms += ms;
    return result.ok() ? ms : -1.0;
  };
  for (std::size_t k = 0; k < chunks.size(); ++k) {
    if (result = decoder_.start_sequence(seq, SamplingParams{}); !result.ok()) break;
    const double ms = timed_chunk(0, chunks[k]);
    const double step_ms = ms >= 0 && chunks[k] < decoder_.n_ctx_seq() ? timed_chunk(chunks[k], 1) : -1.0;
    decoder_.end_sequence(seq);
    if (!result.ok()) break;
    if (k > 0) {
      budget_.observe_prefill(ms, chunks[k]);
      cost_.observe({double(chunks[k]), span_of(0, chunks[k])}, ms);
      if (step_ms > 0) cost_.observe({1.0, span_of(chunks[k], 1), 1.0, kv_read_of(chunks[k])}, step_ms);
    }
    if (k > 0 && spent_ms >= most_ms) break;
  }
  // The prefill floor: chunks of growing size appended to one sequence after a full one, so they
  // run at depth as in serving; the smallest near the best per-token rate is the knee (on a
  // 2-core CPU, chunks under 64 tokens ran 5x slower per token over a deep KV).
  const std::array<std::int32_t, 4> sizes = {part(16), part(8), part(4), part(2)};
  std::int32_t depth = big;
  for (std::int32_t n : sizes) depth += n;
  if (result.ok() && spent_ms < most_ms && depth < decoder_.n_ctx_seq() && (result = decoder_.start_sequence(seq, SamplingParams{})).ok()) {
    std::map<std::int32_t, double> per_token;  // chunk size -> ms per token
    std::int32_t at = 0;
    if (const double ms = timed_chunk(0, big); ms >= 0) {
      budget_.observe_prefill(ms, big);
      cost_.observe({double(big), span_of(0, big)}, ms);
      at = big;
    }
    for (std::int32_t n : sizes) {
      if (!result.ok()) break;
      const double ms = timed_chunk(at, n);
      if (ms < 0) break;
      // Sizes that spread: the tick budget's fit tells a tick's fixed cost from its per-token cost.
      budget_.observe_prefill(ms, n);
      cost_.observe({double(n), span_of(at, n), 0.0, kv_read_of(at)}, ms);
      per_token[n] = ms / n;
      spdlog::debug("calibration: {} tokens at depth {}: {:.3f} ms per token", n, at, ms / n);
      at += n;
    }
    decoder_.end_sequence(seq);
    double best = 1e300;
    for (const auto& [size, ms] : per_token) best = std::min(best, ms);
    for (const auto& [size, ms] : per_token) {  // ascending sizes: the first near the best
      if (ms <= kKneeSlack * best) {
        prefill_knee_ = size;
        break;
      }
    }
  }
  ledger_.ids().give_back(seq);
  metrics_.prefill_fixed_ms = budget_.prefill_fixed_ms();
  metrics_.prefill_ms_per_token = budget_.ms_per_prefill_token();
  return result;
}

}  // namespace uma
