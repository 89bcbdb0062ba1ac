#include "sched/session.h"

#include <spdlog/spdlog.h>

#include <cassert>
#include <cstdlib>

namespace uma {

std::string_view session_state_name(SessionState s) {
  switch (s) {
    case SessionState::kQueued: return "queued";
    case SessionState::kPrefill: return "prefill";
    case SessionState::kDecode: return "decode";
    case SessionState::kPaused: return "paused";
    case SessionState::kFinished: return "finished";
    case SessionState::kFailed: return "failed";
    case SessionState::kCancelled: return "cancelled";
  }
  return "?";
}

bool is_legal_transition(SessionState from, SessionState to) {
  using S = SessionState;
  const bool ends = to == S::kFailed || to == S::kCancelled;
  switch (from) {
    case S::kQueued: return to == S::kPrefill || ends;
    case S::kPrefill: return to == S::kDecode || to == S::kPaused || to == S::kFinished || ends;
    case S::kDecode: return to == S::kPaused || to == S::kFinished || ends;
    case S::kPaused: return to == S::kPrefill || to == S::kDecode || ends;
    default: return false;
  }
}

void Session::set_state(SessionState next) {
  if (!is_legal_transition(state, next)) {
    spdlog::critical("session {}: illegal transition {} -> {}", id, session_state_name(state),
                     session_state_name(next));
    std::abort();
  }
  spdlog::debug("session {}: {} -> {}", id, session_state_name(state), session_state_name(next));
  state = next;
}

}  // namespace uma
