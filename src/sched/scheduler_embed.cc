// Scheduler: the embeddings passes between ticks (sched/embed_queue.h). Split from scheduler.cc to
// keep each file one idea.
#include <algorithm>

#include "sched/scheduler.h"

namespace uma {

// An embeddings pass before the tick's decode. While streams run, their next token waits for it:
// the pass holds the tokens that fit the inter-token target beside their decode at the cost an
// embedded token was measured at (at most embed_tick_tokens; before a pass was measured, one
// input), and at least one input (an input is embedded whole, so a long one costs its own time).
// Otherwise as much as the embeddings context allows.
void Scheduler::run_embeddings(std::vector<Event>& out) {
  if (embeds_.empty()) return;
  const bool streams = std::any_of(sessions_.begin(), sessions_.end(), [](const auto& s) { return is_active(*s); });
  const auto decoding = static_cast<std::int32_t>(
      std::count_if(sessions_.begin(), sessions_.end(), [](const auto& s) { return s->state == SessionState::kDecode; }));
  std::int64_t budget = decoder_.embed_max_tokens();
  if (streams) {
    const double room_ms = budget_.target_ms(decoding) - budget_.base_ms(decoding);
    budget = embed_ms_per_token_ > 0
                 ? std::min<std::int64_t>(config_.embed_tick_tokens, static_cast<std::int64_t>(std::max(0.0, room_ms) / embed_ms_per_token_))
                 : 0;
  }
  const std::uint64_t before = embeds_.tokens_total();
  const Clock::time_point t0 = time_.now();
  embeds_.run(decoder_, budget, out);
  const auto tokens = embeds_.tokens_total() - before;
  if (tokens > 0) {
    const double per = ms_between(t0, time_.now()) / static_cast<double>(tokens);
    embed_ms_per_token_ = embed_ms_per_token_ > 0 ? 0.7 * embed_ms_per_token_ + 0.3 * per : per;
  }
  metrics_.embedding_tokens_total += tokens;
}

}  // namespace uma
