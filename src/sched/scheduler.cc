#include "sched/scheduler.h"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace uma {
namespace {

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

bool is_active(const Session& s) { return s.state == SessionState::kPrefill || s.state == SessionState::kDecode; }
bool is_terminal(const Session& s) {
  return s.state == SessionState::kFinished || s.state == SessionState::kFailed || s.state == SessionState::kCancelled;
}

Event token_event(RequestId id, std::string text, Token token) {
  Event e;
  e.request_id = id;
  e.text = std::move(text);
  e.token_id = token;
  return e;
}

Event error_event(RequestId id, Status status) {
  Event e;
  e.request_id = id;
  e.kind = Event::Kind::kError;
  e.error = std::move(status);
  return e;
}

}  // namespace

Scheduler::Scheduler(Decoder& decoder, ServerMetrics& metrics, const SchedulerConfig& config)
    : decoder_(decoder), metrics_(metrics), config_(config),
      budget_(decoder.n_batch(), config.tick_target_ms, config.start_budget) {
  for (std::int32_t s = decoder.n_seq_max() - 1; s >= 0; --s) free_seqs_.push_back(s);
  metrics_.kv_cells_total = decoder.n_ctx();
}

Scheduler::~Scheduler() {
  for (auto& s : sessions_) {
    if (s->seq >= 0) decoder_.end_sequence(s->seq);
  }
}

void Scheduler::admit(Request request, std::vector<Event>& out) {
  auto s = std::make_unique<Session>();
  s->id = request.id;
  s->received_at = request.received_at;
  s->sampling = request.sampling;
  if (Status st = decoder_.tokenize(request.prompt, s->prompt); !st.ok()) {
    metrics_.count_error(st.code());
    out.push_back(error_event(request.id, st));
    return;
  }
  const auto n_prompt = static_cast<std::int32_t>(s->prompt.size());
  if (n_prompt == 0) {
    metrics_.count_error(ErrorCode::kEmptyPrompt);
    out.push_back(error_event(request.id, Status(ErrorCode::kEmptyPrompt, "prompt has no tokens")));
    return;
  }
  if (n_prompt >= decoder_.n_ctx()) {
    metrics_.count_error(ErrorCode::kContextExceeded);
    out.push_back(error_event(request.id, Status(ErrorCode::kContextExceeded,
        "prompt of " + std::to_string(n_prompt) + " tokens does not fit the context of " +
        std::to_string(decoder_.n_ctx()))));
    return;
  }
  if (request.strict_max_tokens && n_prompt + request.max_tokens > decoder_.n_ctx()) {
    metrics_.count_error(ErrorCode::kContextExceeded);
    out.push_back(error_event(request.id, Status(ErrorCode::kContextExceeded,
        "prompt of " + std::to_string(n_prompt) + " tokens + max_tokens " + std::to_string(request.max_tokens) +
        " exceeds the context of " + std::to_string(decoder_.n_ctx()))));
    return;
  }
  // Generation stops at the context's end: a request never needs more KV than n_ctx.
  const auto queued = std::count_if(sessions_.begin(), sessions_.end(),
                                    [](const auto& x) { return x->state == SessionState::kQueued; });
  // Generation stops at the context's end: a request never needs more KV than n_ctx.
  const std::int32_t max_tokens = std::min({request.max_tokens, config_.max_tokens_cap, decoder_.n_ctx() - n_prompt});
  const std::int32_t need = n_prompt + max_tokens;
  const bool must_wait = queued > 0 || free_seqs_.empty() || reserved_cells_ + need > decoder_.n_ctx();
  if (must_wait && queued >= config_.max_queue) {
    // Admission control: never queue without bound; say so at once.
    metrics_.count_error(ErrorCode::kOverloaded);
    out.push_back(error_event(request.id, Status(ErrorCode::kOverloaded,
        std::to_string(queued) + " requests are already waiting for room")));
    return;
  }
  s->max_tokens = max_tokens;
  s->stop = StopFilter(std::move(request.stop));
  s->slo_ttft_ms = request.slo_ttft_ms > 0 ? request.slo_ttft_ms : config_.slo_ttft_ms;
  s->slo_tbt_ms = request.slo_tbt_ms > 0 ? request.slo_tbt_ms : config_.slo_tbt_ms;
  s->reserved_cells = need;
  metrics_.prompt_tokens_total += static_cast<std::uint64_t>(n_prompt);
  spdlog::debug("session {}: admitted, {} prompt tokens, max_tokens {}", s->id, n_prompt, s->max_tokens);
  sessions_.push_back(std::move(s));
  start_queued();
}

void Scheduler::start_queued() {
  for (auto& s : sessions_) {
    if (s->state != SessionState::kQueued) continue;
    // FIFO: the oldest queued request goes first, so a large one is never overtaken forever.
    if (free_seqs_.empty() || reserved_cells_ + s->reserved_cells > decoder_.n_ctx()) return;
    const std::int32_t seq = free_seqs_.back();
    if (Status st = decoder_.start_sequence(seq, s->sampling); !st.ok()) {
      spdlog::error("session {}: cannot start sequence: {}", s->id, st.to_string());
      return;
    }
    free_seqs_.pop_back();
    s->seq = seq;
    reserved_cells_ += s->reserved_cells;
    s->started_at = Clock::now();
    metrics_.queue_ms.observe(ms_between(s->received_at, s->started_at));
    s->set_state(SessionState::kPrefill);
  }
}

void Scheduler::expire_queued(std::vector<Event>& out) {
  const Clock::time_point now = Clock::now();
  bool any = false;
  for (auto& s : sessions_) {
    if (s->state != SessionState::kQueued || ms_between(s->received_at, now) <= config_.max_queue_ms) continue;
    finish(*s, SessionState::kFailed);
    metrics_.count_error(ErrorCode::kOverloaded);
    out.push_back(error_event(s->id, Status(ErrorCode::kOverloaded, "waited over " +
        std::to_string(static_cast<long>(config_.max_queue_ms)) + " ms for room")));
    any = true;
  }
  if (any) reap();
}

void Scheduler::cancel(RequestId id, std::vector<Event>& out) {
  for (auto& s : sessions_) {
    if (s->id == id && !is_terminal(*s)) {
      complete(*s, FinishReason::kCancelled, out);
      metrics_.requests_cancelled_total++;
    }
  }
  reap();
  start_queued();
}

void Scheduler::fail_all(const Status& why, std::vector<Event>& out) {
  for (auto& s : sessions_) {
    if (is_terminal(*s)) continue;
    finish(*s, SessionState::kFailed);
    out.push_back(error_event(s->id, why));
  }
  reap();
}

bool Scheduler::has_work() const {
  return std::any_of(sessions_.begin(), sessions_.end(), [](const auto& s) { return is_active(*s); });
}

void Scheduler::tick(std::vector<Event>& out) {
  expire_queued(out);
  const Clock::time_point now = Clock::now();
  order_.clear();
  candidates_.clear();
  const std::size_t n = sessions_.size();
  for (std::size_t k = 0; k < n; ++k) {
    Session* s = sessions_[(rr_cursor_ + k) % n].get();
    if (!is_active(*s)) continue;
    const bool decoding = s->state == SessionState::kDecode;
    const bool overdue = decoding && ms_between(s->last_emit_at, now) > s->slo_tbt_ms;
    order_.push_back(s);
    candidates_.push_back({decoding, s->prompt_remaining(), overdue});
  }
  if (order_.empty()) return;
  rr_cursor_ = n == 0 ? 0 : (rr_cursor_ + 1) % n;

  PolicyInput in{budget_.prefill_budget(), decoder_.n_batch(), config_.min_prefill, guard_fired_last_};
  const TickPlan plan = plan_tick(candidates_, in);
  guard_fired_last_ = plan.guard_fired;
  if (plan.guard_fired) metrics_.prefill_skipped_ticks_total++;
  build_batch(plan, order_, batch_);
  if (batch_.entries.empty()) return;

  const Clock::time_point t0 = Clock::now();
  const Status st = decoder_.decode(batch_.entries);
  const Clock::time_point t1 = Clock::now();
  const double decode_ms = ms_between(t0, t1);
  const auto n_tokens = static_cast<std::int32_t>(batch_.entries.size());
  budget_.observe(decode_ms, static_cast<std::int32_t>(batch_.decoded.size()),
                  n_tokens - static_cast<std::int32_t>(batch_.decoded.size()));
  metrics_.batch_calls_total++;
  metrics_.last_batch_size = n_tokens;
  metrics_.decode_ms_last = decode_ms;
  metrics_.decode_ms.observe(decode_ms);
  metrics_.batch_tokens.observe(n_tokens);
  for (const PrefillChunk& c : batch_.prefilled) metrics_.prefill_chunk.observe(c.length);
  metrics_.decode_ms_ewma = budget_.decode_ms_ewma();
  metrics_.tick_budget = budget_.prefill_budget();
  spdlog::debug("tick: {} decode, {} prefill chunks, {} tokens, {:.2f} ms{}", plan.decode.size(),
                plan.prefill.size(), n_tokens, decode_ms, plan.guard_fired ? ", guard fired" : "");

  if (!st.ok()) {
    // The batch is lost as a whole: fail exactly the sessions that were in it.
    spdlog::error("decode of {} tokens failed: {}", n_tokens, st.to_string());
    for (Session* s : batch_.decoded) {
      finish(*s, SessionState::kFailed);
      out.push_back(error_event(s->id, Status(ErrorCode::kDecodeFailed, st.message())));
      metrics_.count_error(ErrorCode::kDecodeFailed);
    }
    for (const PrefillChunk& c : batch_.prefilled) {
      finish(*c.session, SessionState::kFailed);
      out.push_back(error_event(c.session->id, Status(ErrorCode::kDecodeFailed, st.message())));
      metrics_.count_error(ErrorCode::kDecodeFailed);
    }
    reap();
    start_queued();
    return;
  }

  for (Session* s : batch_.decoded) s->n_past += 1;
  for (const PrefillChunk& c : batch_.prefilled) {
    c.session->n_prefilled += c.length;
    c.session->n_past = c.session->n_prefilled;
  }
  for (const LogitsRow& row : batch_.rows) {
    Session& s = *row.session;
    if (s.state == SessionState::kPrefill) s.set_state(SessionState::kDecode);
    apply_token(s, decoder_.sample(s.seq, row.batch_index), t1, out);
  }
  reap();
  start_queued();
}

void Scheduler::apply_token(Session& s, Token token, Clock::time_point now, std::vector<Event>& out) {
  if (s.generated == 0) {
    s.first_token_at = now;
    const double ttft = ms_between(s.received_at, now);
    metrics_.ttft_ms_last = ttft;
    metrics_.ttft_ms.observe(ttft);
    if (ttft > s.slo_ttft_ms) metrics_.ttft_slo_miss_total++;
  } else {
    const double tbt = ms_between(s.last_emit_at, now);
    s.tbt_ms_ewma = s.generated == 1 ? tbt : 0.2 * tbt + 0.8 * s.tbt_ms_ewma;
    s.tbt_ms_max = std::max(s.tbt_ms_max, tbt);
    metrics_.inter_token_ms.observe(tbt);
    if (tbt > s.slo_tbt_ms) metrics_.tbt_slo_miss_total++;
  }
  s.last_emit_at = now;

  if (decoder_.is_end_of_generation(token)) {
    complete(s, FinishReason::kStop, out);
    metrics_.requests_completed_total++;
    return;
  }
  s.generated += 1;
  s.last_token = token;
  metrics_.tokens_generated_total++;
  if (emit_text(s, s.utf8.push(decoder_.piece(token)), token, out)) {
    complete(s, FinishReason::kStop, out, /*stop_matched=*/true);
    metrics_.requests_completed_total++;
  } else if (s.generated >= s.max_tokens) {
    complete(s, FinishReason::kLength, out);
    metrics_.requests_completed_total++;
  }
}

bool Scheduler::emit_text(Session& s, std::string_view text, Token token, std::vector<Event>& out) {
  if (text.empty()) return false;
  bool matched = false;
  std::string safe = s.stop.push(text, &matched);
  if (!safe.empty()) out.push_back(token_event(s.id, std::move(safe), token));
  return matched;
}

void Scheduler::complete(Session& s, FinishReason reason, std::vector<Event>& out, bool stop_matched) {
  if (!stop_matched) {
    // A code point left incomplete, then whatever the stop filter held back, are text after all,
    // unless the tail itself completes a stop string.
    if (emit_text(s, s.utf8.finish(), -1, out)) {
      if (reason != FinishReason::kCancelled) reason = FinishReason::kStop;
    } else if (std::string held = s.stop.flush(); !held.empty()) {
      out.push_back(token_event(s.id, std::move(held), -1));
    }
  }
  const Clock::time_point now = Clock::now();
  Event done;
  done.request_id = s.id;
  done.kind = Event::Kind::kDone;
  done.reason = reason;
  done.prompt_tokens = static_cast<std::int32_t>(s.prompt.size());
  done.completion_tokens = s.generated;
  done.queue_ms = s.state == SessionState::kQueued ? ms_between(s.received_at, now) : ms_between(s.received_at, s.started_at);
  done.ttft_ms = s.generated > 0 ? ms_between(s.received_at, s.first_token_at) : -1.0;
  done.total_ms = ms_between(s.received_at, now);
  out.push_back(std::move(done));
  finish(s, reason == FinishReason::kCancelled ? SessionState::kCancelled : SessionState::kFinished);
}

void Scheduler::finish(Session& s, SessionState terminal) {
  s.set_state(terminal);
  if (s.seq >= 0) {
    decoder_.end_sequence(s.seq);
    free_seqs_.push_back(s.seq);
    reserved_cells_ -= s.reserved_cells;
    s.seq = -1;
  }
}

void Scheduler::reap() {
  std::erase_if(sessions_, [](const auto& s) { return is_terminal(*s); });
}

void Scheduler::publish_metrics() {
  const Clock::time_point now = Clock::now();
  std::int64_t active = 0, queued = 0;
  std::vector<SessionTiming> table;
  table.reserve(sessions_.size());
  for (const auto& s : sessions_) {
    if (is_active(*s)) ++active;
    if (s->state == SessionState::kQueued) ++queued;
    SessionTiming t;
    t.id = s->id;
    t.state = std::string(session_state_name(s->state));
    t.prompt_tokens = static_cast<std::int32_t>(s->prompt.size());
    t.prefilled = s->n_prefilled;
    t.generated = s->generated;
    t.kv_tokens = s->seq >= 0 ? decoder_.kv_tokens(s->seq) : 0;
    t.queue_ms = ms_between(s->received_at, s->state == SessionState::kQueued ? now : s->started_at);
    t.ttft_ms = s->generated > 0 ? ms_between(s->received_at, s->first_token_at) : -1.0;
    t.tbt_ms_ewma = s->tbt_ms_ewma;
    t.tbt_ms_max = s->tbt_ms_max;
    table.push_back(std::move(t));
  }
  std::int64_t kv_tokens = 0, kv_seqs = 0;
  for (std::int32_t seq = 0; seq < decoder_.n_seq_max(); ++seq) {
    const std::int32_t k = decoder_.kv_tokens(seq);
    kv_tokens += k;
    kv_seqs += k > 0 ? 1 : 0;
  }
  metrics_.active_sessions = active;
  metrics_.queued_sessions = queued;
  metrics_.kv_tokens_used = kv_tokens;
  metrics_.kv_sequences_used = kv_seqs;
  metrics_.kv_cells_reserved = reserved_cells_;
  metrics_.publish_sessions(std::move(table));
}

}  // namespace uma
