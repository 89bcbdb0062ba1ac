// The pipelined tick (Scheduler::launch_pipelined, finish_pipelined, settle).
//
// On a GPU llama_decode only queues the work. Decode N+1 needs nothing of tick N but the tokens
// sampled from it, so when every running session just decodes, N+1 is launched as soon as N's
// tokens are read, and N's host work (text, stop strings, events, metrics, delivery) runs while
// the device computes: the device no longer waits for it between two decodes. What is launched
// is known to be right except where N's host work ends a session: EOS, stop token ids and
// max_tokens are seen before the launch (those rows stay out); a stop string matched in N's text
// or a cancellation costs one row computed for nothing, whose cell finish() trims.
// Anything that changes the plan (an arrival, a cancellation, prompt work, drafts the yield guard
// would let verify, embeddings, room) stops the pipeline: those ticks take tick()'s ordinary path
// after settle().
#include <spdlog/spdlog.h>

#include <algorithm>

#include "sched/scheduler.h"

namespace uma {

void Scheduler::settle(std::vector<Event>& out) {
  if (inflight_) finish_pipelined(out, /*relaunch=*/false);
}

void Scheduler::launch_pipelined() {
  if (!config_.pipelined_ticks || !decoder_.decode_is_async() || !embeds_.empty()) return;
  // Every session is a decode row of this batch with its token sampled, and none drafts: the next
  // tick's plan is then exactly these rows again, minus those about to end.
  if (!batch_.prefilled.empty() || batch_.rows.size() != sessions_.size()) return;
  bool drafts_on_offer = false;
  for (std::size_t i = 0; i < batch_.rows.size(); ++i) {
    const Session& s = *batch_.rows[i].session;
    if (s.state != SessionState::kDecode || batch_.rows[i].draft != 0 || !s.draft.empty() || sampled_[i] == kNotSampled) return;
    drafts_on_offer = drafts_on_offer || may_draft(s);
  }
  if (!ledger_.per_seq() && cells_free() < static_cast<std::int32_t>(batch_.rows.size())) return;
  next_.clear();
  for (std::size_t i = 0; i < batch_.rows.size(); ++i) {
    Session& s = *batch_.rows[i].session;
    const Token t = sampled_[i];
    if (ends_generation(s, t) || s.generated + 1 >= s.max_tokens) continue;  // ends when applied
    next_.rows.push_back({&s, static_cast<std::int32_t>(next_.entries.size())});
    next_.entries.push_back({t, s.n_past + 1, s.seq, true});  // apply_batch moves n_past there
    next_.decoded.push_back(&s);
  }
  if (next_.entries.empty()) return;
  // Its next tick may verify drafts, unless speculation is declined for as many rows.
  if (drafts_on_offer && !spec_.declined_ahead(next_.decoded.size())) {
    next_.clear();
    return;
  }
  launched_at_ = time_.now();
  (void)threads_before_decode(launched_at_);  // an asynchronous decode's CPU time is not its own
  inflight_status_ = decoder_.decode(next_.entries);
  if (inflight_status_.code() == ErrorCode::kKvExhausted) {  // nothing changed: the next tick plans
    next_.clear();
    return;
  }
  inflight_ = true;
  for (Session* s : next_.decoded) s->in_flight = true;
  metrics_.pipelined_ticks_total++;
}

void Scheduler::drop_finished_from_next() {
  if (!inflight_) return;
  std::erase_if(next_.rows, [](const LogitsRow& r) { return is_terminal(*r.session); });
  next_.dropped_rows += static_cast<std::int32_t>(std::erase_if(next_.decoded, [](const Session* s) { return is_terminal(*s); }));
}

void Scheduler::finish_pipelined(std::vector<Event>& out, bool relaunch) {
  inflight_ = false;
  std::swap(batch_, next_);
  next_.clear();
  candidates_.clear();  // the last plan's; this tick made none
  order_.clear();
  // The rows are read now: from here a session's KV holds n_past + 1 cells until apply_batch.
  for (Session* s : batch_.decoded) s->in_flight = false;
  ++tick_no_;
  if (!inflight_status_.ok()) {
    fail_batch(inflight_status_, out);
    return;
  }
  decoder_.synchronize();
  const Clock::time_point t1 = time_.now();
  const double decode_ms = ms_between(launched_at_, t1);
  if (spdlog::should_log(spdlog::level::debug)) {
    spdlog::debug("tick {}: {:.1f} ms (predicted {:.1f}), pipelined, {} decode rows", tick_no_, decode_ms,
                  cost_.predict_ms(batch_work()), batch_.rows.size());
  }
  record_tick(decode_ms, published_budget_);
  observe_cost(decode_ms);
  sample_batch();
  observe_yield(decode_ms, /*pipelined=*/true);
  if (relaunch) launch_pipelined();
  apply_batch(t1, out);
  drop_finished_from_next();
  reap();
  start_waiting(out);
  if (!has_work()) spec_.end_period();
}

}  // namespace uma
