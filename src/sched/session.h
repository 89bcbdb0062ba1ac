// Session: the compute-side state of one request, owned by the Scheduler on the compute thread.
//
// State machine (memcached conn_states style; one setter checks every transition):
//   kQueued  -> kPrefill | kFailed | kCancelled      waiting for a sequence id and KV room
//   kPrefill -> kDecode | kFinished | kFailed | kCancelled
//   kDecode  -> kFinished | kFailed | kCancelled
// kFinished / kFailed / kCancelled are terminal; the scheduler then frees the sequence exactly once.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "common/utf8.h"
#include "runtime/decoder.h"
#include "sched/request.h"
#include "sched/stop_filter.h"

namespace uma {

enum class SessionState : std::uint8_t { kQueued, kPrefill, kDecode, kFinished, kFailed, kCancelled };

std::string_view session_state_name(SessionState s);
bool is_legal_transition(SessionState from, SessionState to);

struct Session {
  RequestId id = 0;
  SessionState state = SessionState::kQueued;
  std::int32_t seq = -1;            // KV sequence id while holding one
  std::vector<Token> prompt;
  std::int32_t n_prefilled = 0;     // prompt tokens already in KV
  std::int32_t n_past = 0;          // next position in the sequence
  Token last_token = -1;            // sampled, not yet fed back
  std::int32_t generated = 0;
  std::int32_t max_tokens = 0;
  std::int32_t reserved_cells = 0;  // KV cells promised at admission (prompt + max_tokens)
  SamplingParams sampling;
  Utf8Stream utf8;                  // token bytes -> complete code points
  StopFilter stop;                  // complete text -> text before any stop string
  double slo_ttft_ms = 0.0;
  double slo_tbt_ms = 0.0;

  Clock::time_point received_at{};
  Clock::time_point started_at{};      // left the queue
  Clock::time_point first_token_at{};
  Clock::time_point last_emit_at{};
  double tbt_ms_ewma = 0.0;
  double tbt_ms_max = 0.0;

  std::int32_t prompt_remaining() const { return static_cast<std::int32_t>(prompt.size()) - n_prefilled; }
  // Asserts the transition is legal; traces it under UMA_DEBUG.
  void set_state(SessionState next);
};

}  // namespace uma
