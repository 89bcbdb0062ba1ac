// Session: the compute-side state of one request, owned by the Scheduler on the compute thread.
//
// State machine (memcached conn_states style; one setter checks every transition):
//   kQueued  -> kPrefill | kFailed | kCancelled      waiting for a sequence id and KV room
//   kPrefill -> kDecode | kPaused | kFinished | kFailed | kCancelled
//   kDecode  -> kPaused | kFinished | kFailed | kCancelled
//   kPaused  -> kPrefill | kDecode | kFailed | kCancelled
//                                 preempted: no sequence id, no KV cells; KV saved in `parked`
//                                 (resumes in its old state) or dropped (resumes in kPrefill and
//                                 recomputes every token it had)
// kFinished / kFailed / kCancelled are terminal; the scheduler then frees the sequence exactly once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/state_machine.h"
#include "common/utf8.h"
#include "runtime/decoder.h"
#include "serve/request.h"
#include "sched/speculation.h"
#include "sched/stop_filter.h"

namespace uma {

enum class SessionState : std::uint8_t { kQueued, kPrefill, kDecode, kPaused, kFinished, kFailed, kCancelled };
inline constexpr std::size_t kSessionStates = 7;

const StateTable<SessionState, kSessionStates>& session_states();
inline std::string_view session_state_name(SessionState s) { return session_states().name(s); }

struct Session {
  RequestId id = 0;
  SessionState state = SessionState::kQueued;
  std::int32_t seq = -1;            // KV sequence id while holding one
  Priority priority = Priority::kInteractive;
  std::string tenant;
  // The prompt, then every sampled token. While decoding, the last one is not yet in KV; a
  // prefill (first, or after a dropped-KV pause) feeds tokens[n_prefilled..] in chunks.
  std::vector<Token> tokens;
  std::int32_t n_prompt = 0;
  std::int32_t n_prefilled = 0;     // tokens fed by prefill
  std::int32_t n_past = 0;          // next position in the sequence
  std::int32_t generated = 0;
  std::int32_t max_tokens = 0;       // effective: the request's (or the default), capped, within the context
  SamplingParams sampling;
  Utf8Stream utf8;                  // token bytes -> complete code points
  StopFilter stop;                  // complete text -> text before any stop string
  std::vector<LogprobEntry> pending_logprobs;  // sampling.logprobs: entries whose text is not yet out
  double slo_ttft_ms = 0.0;
  double slo_tbt_ms = 0.0;

  Clock::time_point received_at{};
  Clock::time_point started_at{};      // left the queue (first time; resuming does not change it)
  std::uint64_t start_order = 0;       // the scheduler's count of starts when it started (seniority)
  Clock::time_point first_token_at{};
  Clock::time_point last_emit_at{};
  double ttft_target_ms = 0.0;         // SLO plus its own prefill's predicted time (0: not yet set)
  double bytes_moved = 0.0;            // its share of the ticks' predicted bytes (tick_cost.h)
  double tbt_ms_ewma = 0.0;
  double tbt_ms_max = 0.0;

  // Prefix cache: waiting for a running session (the leader) to prefill the prompt prefix this one
  // shares, to copy its cells rather than compute them again.
  RequestId follow = 0;             // 0: not following
  std::int32_t follow_len = 0;
  std::uint32_t led = 0;            // requests that shared this one's prompt while it ran (its followers)
  // Prompt tokens the cache could share when the request arrived: while it waits, the prefill
  // backlog counts only the rest (what a router weighs behind it; never used to grant cells).
  std::int32_t reusable_at_arrival = 0;
  std::int32_t shared_prefix = 0;   // prompt tokens whose cells were shared from another sequence
  std::int32_t cached_tokens = 0;   // prompt tokens whose KV the prefix cache gave at start (usage's cached tokens)
  bool prompt_told = false;         // its first token event said n_prompt and cached_tokens
  bool report_progress = false;     // a kProgress event after each prompt chunk (Request::report_progress)
  // Where they came from, while that source may still hold them (cells counted there, not here):
  // a kept sequence of the prefix cache, or a running session (the leader).
  std::int32_t shared_from_seq = -1;
  RequestId shared_from_session = 0;

  // Speculative decoding (sched/speculation.h): whether it speculates, its draft tokens in the
  // tick being built (fed after its last token, each with a logits row), its acceptance estimate.
  bool speculate = false;
  bool speculated = false;          // some draft went into KV (finish trims the KV to n_past)
  // A pipelined decode in flight holds a row of its (KV one cell past n_past until it is applied).
  bool in_flight = false;
  std::vector<Token> draft;
  std::size_t draft_proposed = 0;   // of draft, the tokens proposed; the rest pad a steady shape (plan_drafts)
  double accept = kAcceptancePrior;
  // The client's expected output (OpenAI's `prediction`), a draft source before prompt lookup;
  // where its drafts left off, whether this tick's draft came from it, and its tokens accepted and
  // rejected in verification (the reply's usage says them).
  std::vector<Token> prediction;
  std::size_t prediction_at = 0;
  bool draft_from_prediction = false;
  std::int32_t prediction_accepted = 0;
  std::int32_t prediction_rejected = 0;

  // The prompt's images (serve/request.h), by position: their positions are prefilled from their
  // embeddings, in chunks apart from text (a decoder feeds the two kinds to llama.cpp apart).
  std::vector<PromptImage> images;

  // Preemption.
  ParkedSequence parked;               // while kPaused: sampler, and the KV when it was saved
  SessionState paused_from = SessionState::kQueued;
  Clock::time_point paused_at{};
  double paused_ms_total = 0.0;        // over every pause so far
  std::int32_t preemptions = 0;

  Token last_token() const { return tokens.back(); }
  std::int32_t prompt_remaining() const { return static_cast<std::int32_t>(tokens.size()) - n_prefilled; }
  bool background() const { return priority == Priority::kBackground; }
  // The image holding position `pos`, or null.
  const PromptImage* image_at(std::int32_t pos) const;
  // Where a prefill chunk starting at `from` must end at the latest: its image's end when `from` is
  // in one, else the next image's start, else the end of the tokens.
  std::int32_t prefill_run_end(std::int32_t from) const;
  // Asserts the transition is legal; traces it under UMA_DEBUG.
  void set_state(SessionState next);
};

inline bool is_active(const Session& s) { return s.state == SessionState::kPrefill || s.state == SessionState::kDecode; }
inline bool is_waiting(const Session& s) { return s.state == SessionState::kQueued || s.state == SessionState::kPaused; }
inline bool is_terminal(const Session& s) {
  return s.state == SessionState::kFinished || s.state == SessionState::kFailed || s.state == SessionState::kCancelled;
}

}  // namespace uma
