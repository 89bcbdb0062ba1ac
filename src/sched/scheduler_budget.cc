// The scheduler's cost model and SLO budget (tick_cost.h, policy.h slo_prefill_budget): what a
// tick is predicted to cost, what it cost, and how many prompt tokens the next one carries.
#include <algorithm>

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
  in.fill_when_met = config_.slo_fill;
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

}  // namespace uma
