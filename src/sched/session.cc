#include "sched/session.h"

#include <spdlog/spdlog.h>

namespace uma {

const StateTable<SessionState, kSessionStates>& session_states() {
  using S = SessionState;
  static const StateTable<SessionState, kSessionStates> table(
      "session", {"queued", "prefill", "decode", "paused", "finished", "failed", "cancelled"},
      {{S::kQueued, {S::kPrefill, S::kFailed, S::kCancelled}},
       {S::kPrefill, {S::kDecode, S::kPaused, S::kFinished, S::kFailed, S::kCancelled}},
       {S::kDecode, {S::kPaused, S::kFinished, S::kFailed, S::kCancelled}},
       {S::kPaused, {S::kPrefill, S::kDecode, S::kFailed, S::kCancelled}}});
  return table;
}

void Session::set_state(SessionState next) {
  spdlog::debug("session {}: {} -> {}", id, session_state_name(state), session_state_name(next));
  move_state(session_states(), state, next, id);
}

}  // namespace uma
