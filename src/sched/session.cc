#include "sched/session.h"

#include <spdlog/spdlog.h>

#include <algorithm>

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

const PromptImage* Session::image_at(std::int32_t pos) const {
  for (const PromptImage& im : images) {
    if (im.holds(pos)) return &im;
  }
  return nullptr;
}

std::int32_t Session::prefill_run_end(std::int32_t from) const {
  auto end = static_cast<std::int32_t>(tokens.size());
  for (const PromptImage& im : images) {
    if (im.holds(from)) return im.pos + im.n_tokens;
    if (im.pos > from) return std::min(end, im.pos);
  }
  return end;
}

}  // namespace uma
