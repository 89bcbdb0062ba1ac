#include "sched/scheduler.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>

namespace uma {
namespace {
SchedulerConfig for_layout(SchedulerConfig c, const Decoder& decoder) {
  if (decoder.kv_per_sequence()) c.min_prefill = c.per_seq_min_prefill < 0 ? decoder.n_ubatch() : c.per_seq_min_prefill;
  return c;
}
}  // namespace

namespace {
KvShape kv_shape(const Decoder& decoder, const SchedulerConfig& config) {
  KvShape k;
  k.n_ctx = decoder.n_ctx();
  k.n_ctx_seq = decoder.n_ctx_seq();
  k.n_seq_max = decoder.n_seq_max();
  k.per_seq = decoder.kv_per_sequence();
  k.watermark_share = config.kv_watermark;
  k.preemption = config.preemption;
  return k;
}
ModelShape model_shape(const Decoder::Shape& s) {
  return {s.weight_bytes, s.params, s.n_layer, s.n_embd, s.kv_bytes_per_cell};
}
}  // namespace

Scheduler::Scheduler(Decoder& decoder, ServerMetrics& metrics, const SchedulerConfig& config, const TimeSource& time)
    : decoder_(decoder), metrics_(metrics), config_(for_layout(config, decoder)), time_(time),
      budget_(decoder.n_ubatch(), config_.tick_target_ms, config_.start_budget, config_.min_prefill),
      cost_(model_shape(decoder.shape())),
      ledger_(kv_shape(decoder, config)), cache_(decoder, metrics, config.prefix, time, ledger_.ids()),
      spec_({config_.speculate_always, config_.draft_max, config_.spec_uniform_streams_below}, metrics) {
  if (ledger_.per_seq()) cache_.set_min_reuse(std::max(config.prefix.min_reuse, config.per_seq_min_reuse));
  cache_.set_keep_unseen_min(ledger_.per_seq() ? 0 : config.unified_keep_unseen_min);
  cache_.set_save_leaves(!ledger_.per_seq());
  cache_.set_in_place(ledger_.per_seq());
  metrics_.kv_cells_total = decoder.n_ctx();
}

Scheduler::~Scheduler() {
  if (inflight_) decoder_.synchronize();
  if (calibration_ && calibration_->open) decoder_.end_sequence(calibration_->seq);
  for (auto& s : sessions_) {
    if (s->seq >= 0) decoder_.end_sequence(s->seq);
  }
  cache_.clear();
}

bool Scheduler::has_work() const {
  return inflight_ || !embeds_.empty() || std::any_of(sessions_.begin(), sessions_.end(), [](const auto& s) { return is_active(*s); });
}

// One tick: gather -> plan -> decode -> sample every row -> (launch the next) -> apply. Sessions
// change state only in the last step, after every row of the batch has been sampled, so finishing
// one (which may end, keep or move its sequence) never happens between two sample() calls of the
// same decode. With a decode in flight (the pipelined tick) a tick reads that one instead.
void Scheduler::tick(std::vector<Event>& out) {
  spec_.close_yield(time_.now(), tick_no_);
  if (inflight_) return finish_pipelined(out, /*relaunch=*/true);
  run_embeddings(out);
  prepare_tick(out);
  const Clock::time_point now = time_.now();
  if (!gather(now)) return;
  const auto n_decoding = static_cast<std::int32_t>(
      std::count_if(candidates_.begin(), candidates_.end(), [](const Candidate& c) { return c.decoding; }));
  // Beside decoding streams a tick is one pass long (n_ubatch), on a GPU too: a long prompt's
  // chunk over several passes held every stream for all of them (docs/BENCHMARKS.md, mixed load).
  PolicyInput in{budget_.prefill_budget(n_decoding), decoder_.n_ubatch(), prefill_floor(), guard_fired_last_,
                 budget_.tokens_in(config_.slo_ttft_ms)};  // an arrival waits about its TTFT target at most
  in.whole_prompts = ledger_.per_seq();
  in.idle_capacity = decoder_.n_batch();
  // What is published (tick_prefill_budget_tokens) stays the controller's figure: a router's TTFT
  // model reads it as a prompt's tokens per tick, and was fitted to it.
  const std::int32_t published_budget = in.budget;
  if (const std::int32_t slo = slo_budget(now, in.capacity - n_decoding); slo > 0) {
    // The SLO budget weighs the streams' gaps itself: the overdue guard would second-guess it.
    in.budget = slo;
    for (Candidate& c : candidates_) c.overdue = false;
  }
  const TickPlan plan = plan_tick(candidates_, in);
  guard_fired_last_ = plan.guard_fired;
  if (plan.guard_fired) metrics_.prefill_skipped_ticks_total++;
  build_batch(plan, order_, batch_);
  if (batch_.entries.empty()) return;
  plan_speculation(plan);

  const Clock::time_point t0 = time_.now();
  const double cpu_before_ms = threads_before_decode(t0);
  const Status st = decoder_.decode(batch_.entries);
  if (st.ok()) decoder_.synchronize();  // an asynchronous decode's time is its results'
  const Clock::time_point t1 = time_.now();
  const double decode_ms = ms_between(t0, t1);
  if (st.ok()) threads_after_decode(decode_ms, cpu_before_ms);
  ++tick_no_;
  if (spdlog::should_log(spdlog::level::debug)) trace_tick(plan, in.budget, decode_ms, st);
  if (st.code() == ErrorCode::kKvExhausted && recover_kv_exhausted()) return;  // retried next tick
  if (!st.ok()) {
    fail_batch(st, out);
    return;
  }
  record_tick(decode_ms, published_budget);
  published_budget_ = published_budget;
  observe_cost(decode_ms);
  sample_batch();
  const Clock::time_point t_sampled = time_.now();
  observe_yield(decode_ms, /*pipelined=*/false);
  launch_pipelined();
  const Clock::time_point t_launched = time_.now();
  apply_batch(t1, out);
  const Clock::time_point t_applied = time_.now();
  drop_finished_from_next();
  reap();
  start_waiting(out);
  if (!has_work()) spec_.end_period();  // the compute loop waits: no period to close
  // The host side of the tick (sampling, text, events; not delivery): what the GPU waits for.
  if (spdlog::should_log(spdlog::level::debug)) {
    const Clock::time_point t_end = time_.now();
    spdlog::debug("tick {}: host {:.2f} ms after the decode for {} rows (sample {:.2f}, launch {:.2f}, apply {:.2f}, rest {:.2f})",
                  tick_no_, ms_between(t1, t_end), batch_.rows.size(), ms_between(t1, t_sampled),
                  ms_between(t_sampled, t_launched), ms_between(t_launched, t_applied), ms_between(t_applied, t_end));
  }
}

void Scheduler::prepare_tick(std::vector<Event>& out) {
  expire_queued(out);
  // Idle kept cells slow every decode only where attention spans one pool (a unified KV); with
  // per-sequence KV they cost nothing until room is needed, and dropping them on a timer throws
  // away the prefixes a router sent requests here for (measured on a GPU, 3 agents, 32 groups:
  // every kept prefix dropped before its next turn came).
  if (!ledger_.per_seq()) cache_.offload_idle(time_.now());
  start_waiting(out);
  resolve_followers();
  make_room_for_tick(time_.now());
  compact_sequences();
  group_prompt_ids(out);
}

bool Scheduler::gather(Clock::time_point now) {
  if (!ledger_.per_seq()) unified_span_ = cells_granted();
  order_.clear();
  candidates_.clear();
  const std::size_t n = sessions_.size();
  const double ms_per_token = budget_.ms_per_prefill_token();
  for (std::size_t k = 0; k < n; ++k) {
    Session* s = sessions_[(rr_cursor_ + k) % n].get();
    if (!is_active(*s)) continue;
    s->draft.clear();  // the last tick's; plan_speculation gives this tick's
    Candidate c;
    c.decoding = s->state == SessionState::kDecode;
    // A follower has nothing to prefill until its leader has prefilled the shared prefix.
    c.prompt_remaining = c.decoding || s->follow != 0 ? 0 : s->prompt_remaining();
    c.rank = rank_of(*s, now);
    c.background = s->background();
    // Only interactive streams hold prefill back; background ones take the gap.
    c.overdue = c.decoding && !s->background() && ms_between(s->last_emit_at, now) > s->slo_tbt_ms;
    const double target = c.prompt_remaining > 0 ? ttft_target(*s) : s->slo_ttft_ms;
    c.slack_ms = target - ms_between(s->received_at, now) - c.prompt_remaining * ms_per_token;
    order_.push_back(s);
    candidates_.push_back(c);
  }
  if (order_.empty()) return false;
  rr_cursor_ = (rr_cursor_ + 1) % n;
  return true;
}

void Scheduler::fail_batch(const Status& st, std::vector<Event>& out) {
  // The batch is lost as a whole: fail exactly the sessions that were in it.
  spdlog::error("decode of {} tokens failed: {}", batch_.entries.size(), st.to_string());
  auto fail = [&](Session& s) {
    finish(s, SessionState::kFailed);
    out.push_back(error_event(s.id, Status(ErrorCode::kDecodeFailed, st.message())));
    metrics_.count_error(ErrorCode::kDecodeFailed);
  };
  for (Session* s : batch_.decoded) fail(*s);
  for (const PrefillChunk& c : batch_.prefilled) fail(*c.session);
  reap();
  start_waiting(out);
}

void Scheduler::record_tick(double decode_ms, std::int32_t budget) {
  const auto n_tokens = static_cast<std::int32_t>(batch_.entries.size());
  const bool prefill_pending = std::any_of(candidates_.begin(), candidates_.end(),
                                           [](const Candidate& c) { return c.prompt_remaining > 0; });
  budget_.observe(decode_ms, batch_.decode_rows(), n_tokens - batch_.decode_rows(), prefill_pending);
  metrics_.batch_calls_total++;
  metrics_.last_batch_size = n_tokens;
  metrics_.decode_ms_last = decode_ms;
  metrics_.decode_ms.observe(decode_ms);
  metrics_.batch_tokens.observe(n_tokens);
  for (const PrefillChunk& c : batch_.prefilled) metrics_.prefill_chunk.observe(c.length);
  metrics_.decode_ms_ewma = budget_.decode_ms_ewma();
  metrics_.decode_step_ms = batch_.decode_rows() == 0 ? 0.0 : budget_.base_ms(batch_.decode_rows());
  metrics_.tick_budget = budget;
  metrics_.tick_prefill_floor = budget_.floor();
  metrics_.prefill_fixed_ms = budget_.prefill_fixed_ms();
  metrics_.prefill_ms_per_token = budget_.ms_per_prefill_token();
}

void Scheduler::apply_batch(Clock::time_point decoded_at, std::vector<Event>& out) {
  for (const PrefillChunk& c : batch_.prefilled) {
    Session& s = *c.session;
    s.n_prefilled += c.length;
    s.n_past = s.n_prefilled;
    if (s.report_progress) {
      Event e;
      e.request_id = s.id;
      e.kind = Event::Kind::kProgress;
      e.prompt_tokens = s.n_prompt;
      e.cached_tokens = s.cached_tokens;
      e.prompt_processed = s.n_prefilled;
      e.queue_ms = ms_between(s.received_at, s.started_at);
      e.total_ms = ms_between(s.received_at, decoded_at);
      out.push_back(std::move(e));
    }
  }
  // A decode row's input token is in KV once its token applies; a speculating session's accepted
  // draft tokens one by one after it, so that a token ending the request leaves n_past (what
  // finish() keeps) at the tokens before it.
  for (std::size_t i = 0; i < batch_.rows.size(); ++i) {
    Session& s = *batch_.rows[i].session;
    if (sampled_[i] == kNotSampled || is_terminal(s)) continue;
    if (s.state == SessionState::kPrefill) {
      s.set_state(SessionState::kDecode);
    } else {
      s.n_past += 1;
    }
    apply_token(s, sampled_[i], decoded_at, out);
  }
}

void Scheduler::trace_tick(const TickPlan& plan, std::int32_t budget, double decode_ms, const Status& st) const {
  std::string line = fmt::format("tick {}: {:.1f} ms (predicted {:.1f}), budget {} (SLO ratios {:.2f}/{:.2f}), decode [",
                                 tick_no_, decode_ms, cost_.predict_ms(batch_work()), budget,
                                 metrics_.slo_stream_ratio.load(), metrics_.slo_prompt_ratio.load());
  for (std::size_t k = 0; k < plan.decode.size(); ++k) {
    const Session& s = *order_[plan.decode[k]];
    line += fmt::format("{}{}{}", k ? " " : "", s.id, s.background() ? "b" : "");
  }
  line += "], prefill [";
  for (std::size_t k = 0; k < plan.prefill.size(); ++k) {
    const Session& s = *order_[plan.prefill[k].first];
    line += fmt::format("{}{}{}:{}/{}", k ? " " : "", s.id, s.background() ? "b" : "", plan.prefill[k].second,
                        s.prompt_remaining());
  }
  line += "]";
  if (plan.guard_fired) {
    const Session& late = *order_[plan.guard_for];
    line += fmt::format(", guard: {} waited {:.0f} ms > {:.0f} ms", late.id,
                        ms_between(late.last_emit_at, time_.now()) - decode_ms, late.slo_tbt_ms);
  }
  if (!st.ok()) line += ", " + st.to_string();
  spdlog::debug("{}", line);
}

void Scheduler::publish_metrics() {
  const Clock::time_point now = time_.now();
  std::array<std::int64_t, kGaugeStates> by_state{};
  std::vector<SessionTiming> table;
  table.reserve(sessions_.size());
  std::int64_t backlog = 0;
  for (const auto& s : sessions_) {
    // What is left to compute: a waiting request's prefix held in KV, or the part a follower
    // will share from its leader, is not (a router would otherwise see a queue of cache hits as
    // a queue of whole prompts).
    if (!is_terminal(*s)) {
      const std::int32_t shared = s->follow != 0 ? s->follow_len : s->state == SessionState::kQueued ? s->reusable_at_arrival : 0;
      backlog += std::max(0, s->n_prompt - std::max(s->n_prefilled, shared));
    }
    switch (s->state) {
      case SessionState::kQueued: by_state[static_cast<std::size_t>(GaugeState::kQueued)]++; break;
      case SessionState::kPrefill: by_state[static_cast<std::size_t>(GaugeState::kPrefill)]++; break;
      case SessionState::kDecode: by_state[static_cast<std::size_t>(GaugeState::kDecode)]++; break;
      case SessionState::kPaused: by_state[static_cast<std::size_t>(GaugeState::kPaused)]++; break;
      default: break;
    }
    SessionTiming t;
    t.id = s->id;
    t.state = std::string(session_state_name(s->state));
    t.background = s->background();
    t.preemptions = s->preemptions;
    t.prompt_tokens = s->n_prompt;
    t.prefilled = std::min(s->n_prefilled, s->n_prompt);
    t.generated = s->generated;
    t.kv_tokens = s->seq >= 0 ? decoder_.kv_tokens(s->seq) : 0;
    t.queue_ms = ms_between(s->received_at, s->state == SessionState::kQueued ? now : s->started_at);
    t.ttft_ms = s->generated > 0 ? ms_between(s->received_at, s->first_token_at) : -1.0;
    t.tbt_ms_ewma = s->tbt_ms_ewma;
    t.tbt_ms_max = s->tbt_ms_max;
    t.bytes_per_token = s->generated > 0 ? s->bytes_moved / s->generated : 0.0;
    table.push_back(std::move(t));
  }
  std::int64_t kv_tokens = 0, kv_seqs = 0;
  for (std::int32_t seq = 0; seq < decoder_.n_seq_max(); ++seq) {
    if (cache_.holds(seq)) continue;  // kept prefixes are reported by the cache
    const std::int32_t k = decoder_.kv_tokens(seq);
    kv_tokens += k;
    kv_seqs += k > 0 ? 1 : 0;
  }
  for (std::size_t i = 0; i < kGaugeStates; ++i) metrics_.sessions_by_state[i] = by_state[i];
  metrics_.active_sessions = by_state[static_cast<std::size_t>(GaugeState::kPrefill)] +
                             by_state[static_cast<std::size_t>(GaugeState::kDecode)];
  metrics_.queued_sessions = by_state[static_cast<std::size_t>(GaugeState::kQueued)] +
                             by_state[static_cast<std::size_t>(GaugeState::kPaused)];
  metrics_.prefill_backlog_tokens = backlog;
  metrics_.backlog_admitted = metrics_.requests_admitted_total.load();  // admit() runs on this thread too
  metrics_.kv_tokens_used = kv_tokens;
  metrics_.kv_sequences_used = kv_seqs;
  // What running requests claim; kept prefixes are the cache's, reported apart. Summed here for
  // both layouts: per-sequence KV adds no pool up (cells_granted() is 0 there).
  std::int64_t claimed = 0;
  for (const auto& s : sessions_) {
    if (s->seq >= 0) claimed += claim(*s);
  }
  metrics_.kv_cells_granted = claimed;
  metrics_.parked_bytes = static_cast<std::int64_t>(parked_bytes_);
  metrics_.publish_sessions(std::move(table));
}

}  // namespace uma
