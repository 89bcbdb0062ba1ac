// Scheduler: requests in and out before they run (scheduler.h): admission (the request's limits
// checked, its prompt tokenized, a session queued), queue deadlines, cancellation, failing all.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "sched/scheduler.h"

namespace uma {

void Scheduler::admit(Request request, std::vector<Event>& out) {
  end_calibration("cut short by the first request");  // what it measured is kept
  settle(out);
  if (!request.embed_inputs.empty()) {
    metrics_.embedding_requests_total++;
    return embeds_.add(decoder_, std::move(request), out);
  }
  auto s = std::make_unique<Session>();
  s->id = request.id;
  s->received_at = request.received_at;
  s->sampling = request.sampling;
  s->priority = request.priority;
  s->tenant = std::move(request.tenant);
  s->report_progress = request.report_progress;
  Status st = request.prepare_status;
  if (st.ok()) st = read_prompt(request, *s);
  if (st.ok()) st = size_request(request, *s);
  if (st.ok()) st = check_admission_caps(*s);
  if (!st.ok()) {
    metrics_.count_error(st.code());
    out.push_back(error_event(request.id, std::move(st)));
    return;
  }
  set_session_targets(request, *s);
  metrics_.prompt_tokens_total += static_cast<std::uint64_t>(s->n_prompt);
  metrics_.requests_admitted_total++;
  spdlog::debug("session {}: admitted ({}), {} prompt tokens, max_tokens {}", s->id,
                s->background() ? "background" : "interactive", s->n_prompt, s->max_tokens);
  sessions_.push_back(std::move(s));
  start_waiting(out);
}

Status Scheduler::read_prompt(Request& request, Session& s) {
  const auto not_in_vocabulary = [](Token t, const char* param) {
    return Status(ErrorCode::kBadRequest, "token " + std::to_string(t) + " is not in the vocabulary", param);
  };
  s.images = std::move(request.prompt_images);
  if (!request.prompt_tokens.empty()) {
    for (std::size_t i = 0; i < request.prompt_tokens.size(); ++i) {
      const Token t = request.prompt_tokens[i];
      if (!decoder_.valid_token(t) && s.image_at(static_cast<std::int32_t>(i)) == nullptr) return not_in_vocabulary(t, "prompt");
    }
    s.tokens = std::move(request.prompt_tokens);
  } else if (Status st = decoder_.tokenize(request.prompt, s.tokens, request.parse_special); !st.ok()) {
    return Status(st.code(), st.message());
  }
  for (Token t : s.sampling.stop_token_ids) {
    if (!decoder_.valid_token(t)) return not_in_vocabulary(t, "stop_token_ids");
  }
  for (const SamplingParams::TokenBias& b : s.sampling.logit_bias) {
    if (!decoder_.valid_token(b.token)) return not_in_vocabulary(b.token, "logit_bias");
  }
  for (Token t : request.continuation) {
    if (!decoder_.valid_token(t)) return not_in_vocabulary(t, "uma.resume");
  }
  s.tokens.insert(s.tokens.end(), request.continuation.begin(), request.continuation.end());
  return Status::Ok();
}

Status Scheduler::size_request(const Request& request, Session& s) {
  const auto n_prompt = static_cast<std::int32_t>(s.tokens.size());
  if (n_prompt == 0) return Status(ErrorCode::kEmptyPrompt, "prompt has no tokens");
  const std::int32_t n_ctx = decoder_.n_ctx_seq();
  // The prompt and at least one generated token must fit one sequence (the whole context at most).
  if (n_prompt >= n_ctx) {
    metrics_.count_rejected(RejectReason::kContext);
    return Status(ErrorCode::kContextExceeded,
                  "prompt of " + std::to_string(n_prompt) + " tokens does not fit the context of " + std::to_string(n_ctx),
                  "prompt");
  }
  // max_tokens: the request's, else the default, else up to the context's end; a cap lowers it.
  // Only a max_tokens the request asked for is an error when it cannot fit (OpenAI's behaviour).
  const std::int64_t unbounded = n_ctx - n_prompt;
  std::int64_t max_tokens = request.max_tokens > 0 ? request.max_tokens
                            : config_.default_max_tokens > 0 ? config_.default_max_tokens : unbounded;
  if (config_.max_tokens_cap > 0) max_tokens = std::min<std::int64_t>(max_tokens, config_.max_tokens_cap);
  if (request.max_tokens > 0 && n_prompt + max_tokens > n_ctx && request.max_tokens_to_context_end) max_tokens = unbounded;
  if (request.max_tokens > 0 && n_prompt + max_tokens > n_ctx) {
    metrics_.count_rejected(RejectReason::kContext);
    return Status(ErrorCode::kContextExceeded,
                  "prompt of " + std::to_string(n_prompt) + " tokens + max_tokens " + std::to_string(max_tokens) +
                      " exceeds the context of " + std::to_string(n_ctx) + " (at most " + std::to_string(unbounded) + " fit)",
                  "max_tokens");
  }
  s.n_prompt = n_prompt;
  // Generation stops at the context's end: a request never needs more KV than n_ctx.
  s.max_tokens = static_cast<std::int32_t>(std::min(max_tokens, unbounded));
  return Status::Ok();
}

Status Scheduler::check_admission_caps(Session& s) {
  if (config_.tenant_max_requests > 0 && !s.tenant.empty()) {
    const auto held = std::count_if(sessions_.begin(), sessions_.end(), [&](const auto& x) { return x->tenant == s.tenant; });
    if (held >= config_.tenant_max_requests) {
      metrics_.count_rejected(RejectReason::kTenantCap);
      return Status(ErrorCode::kOverloaded, "tenant '" + s.tenant + "' already has " + std::to_string(held) +
                                                " requests in flight (cap " + std::to_string(config_.tenant_max_requests) + ")");
    }
  }
  const auto queued = std::count_if(sessions_.begin(), sessions_.end(),
                                    [](const auto& x) { return x->state == SessionState::kQueued; });
  s.reusable_at_arrival = reusable_now(s);
  const bool must_wait = queued > 0 || !fits(s);
  if (must_wait && queued >= config_.max_queue) {
    // Admission control: never queue without bound; say so at once.
    metrics_.count_rejected(RejectReason::kQueueFull);
    return Status(ErrorCode::kOverloaded, std::to_string(queued) + " requests are already waiting for room");
  }
  return Status::Ok();
}

void Scheduler::set_session_targets(Request& request, Session& s) {
  s.stop = StopFilter(std::move(request.stop));
  const double ttft_default = s.background() ? config_.background_max_wait_ms : config_.slo_ttft_ms;
  s.slo_ttft_ms = request.slo_ttft_ms > 0 ? request.slo_ttft_ms : ttft_default;
  s.slo_tbt_ms = request.slo_tbt_ms > 0 ? request.slo_tbt_ms : config_.slo_tbt_ms;
  // Drafts are token ids: a prompt with images (stand-in ids) gives a drafter nothing to match.
  s.speculate = request.speculative.value_or(config_.speculate) && config_.draft_max > 0 && s.images.empty();
  if (s.speculate && !request.prediction.empty()) take_prediction(s, request.prediction);
  s.accept = spec_.starting_acceptance();
}

void Scheduler::expire_queued(std::vector<Event>& out) {
  const Clock::time_point now = time_.now();
  bool any = false;
  for (auto& s : sessions_) {
    if (s->state != SessionState::kQueued || ms_between(s->received_at, now) <= config_.max_queue_ms) continue;
    finish(*s, SessionState::kFailed);
    metrics_.count_error(ErrorCode::kOverloaded);
    metrics_.count_rejected(RejectReason::kQueueTimeout);
    out.push_back(error_event(s->id, Status(ErrorCode::kOverloaded, "waited over " +
        std::to_string(static_cast<long>(config_.max_queue_ms)) + " ms for room")));
    any = true;
  }
  if (any) reap();
}

void Scheduler::cancel(RequestId id, std::vector<Event>& out) {
  settle(out);
  if (embeds_.cancel(id, out)) return;
  for (auto& s : sessions_) {
    if (s->id == id && !is_terminal(*s)) {
      complete(*s, FinishReason::kCancelled, out);
      metrics_.requests_cancelled_total++;
    }
  }
  reap();
  start_waiting(out);
}

void Scheduler::fail_all(const Status& why, std::vector<Event>& out) {
  end_calibration("stopped");
  settle(out);
  embeds_.fail_all(why, out);
  for (auto& s : sessions_) {
    if (is_terminal(*s)) continue;
    finish(*s, SessionState::kFailed);
    out.push_back(error_event(s->id, why));
  }
  reap();
  cache_.clear();
}

}  // namespace uma
