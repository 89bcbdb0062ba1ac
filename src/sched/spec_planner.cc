#include "sched/spec_planner.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <utility>

namespace uma {

double SpecPlanner::starting_acceptance() const { return std::clamp(accept_, 0.1, 0.9); }

DraftPlan SpecPlanner::plan(const SpecTickFacts& tick, std::vector<DraftOffer>& offers, std::span<const SpecCandidate> who) {
  // The draft model's steps are shared by the sessions drafting together.
  const auto n_model = static_cast<double>(std::count_if(who.begin(), who.end(), [](const SpecCandidate& c) { return c.by_model; }));
  for (std::size_t k = 0; k < offers.size(); ++k) {
    if (who[k].by_model) offers[k].ms_per_token = drafter_->step_ms(static_cast<std::size_t>(n_model)) / n_model;
  }
  const std::size_t n_rows = tick.decode_rows;
  std::int32_t room = tick.room;
  const std::int32_t cap = config_.speculate_always ? room : yield_guard_.max_draft_rows(n_rows);
  room = std::min(room, cap);
  yield_guard_.set_plain_first(!tick.device);
  if (!config_.speculate_always) room = stretch_room(tick, room);
  DraftPlanInput in{offers, static_cast<double>(n_rows), tick.tick_ms, room};
  double overhead_ms = 0, call_ms = 0, catch_up_ms = 0;
  in.fixed_ms = fixed_ms(tick, who, n_model, &overhead_ms, &call_ms, &catch_up_ms);
  // On a GPU a decode of a new shape is captured as a new CUDA graph, and the next one again: a
  // steady number of draft rows (the best measured arm's top) is worth more than each row's margin.
  // Before the guard has an arm for this bucket, the top of the arm the plan falls in.
  if (tick.device) {
    const std::int32_t steady = yield_guard_.steady_rows(n_rows);
    in.fill_to = steady > 0 ? std::min(cap, steady) : cap;
    in.fill_to_arm_top = steady == 0;
  }
  if (config_.speculate_always) {
    for (DraftOffer& o : offers) o.accept = 1.0, o.ms_per_token = 0.0;
    in.tick_ms = [](std::int32_t) { return 1.0; };  // rows free: all of every offer, in room
    in.fixed_ms = 0.0;  // and no fixed cost (a slow draft call, under a sanitizer, declined them)
  }
  DraftPlan dp = plan_drafts(in);
  if (tick.per_seq && dp.rows > 0 && !config_.speculate_always) check_passes(tick, in, offers, who, dp);
  // A declined plan samples none of the costs that declined it: they drift back, so that a stale
  // estimate (a cold first draft step, a shared CPU's drifting speed) is tried again. Where drafts
  // really do not pay, the yield guard's measurement then declines them, its probes ever rarer.
  if (dp.declined && !config_.speculate_always) {
    yield_guard_.declined_under_cap(n_rows);
    if (in.fixed_ms > 0) overhead_ms_.decay(n_rows, 0.95);
    if (n_model > 0) drafter_->decay_costs(static_cast<std::size_t>(n_model), 0.8);
  }
  const bool planned = dp.rows > 0;
  if (planned && tick.device) yield_guard_.pin(n_rows, dp.rows);
  plan_declined_bucket_ = planned ? 0 : SpecYieldGuard::bucket_of(n_rows);
  ticks_since_plan_ = 0;
  const bool granted = std::exchange(granted_, false);
  // (The plan's proposals go too: a draft model drafting for a declined tick cost 12 ms a tick at
  // 16 streams on a CPU, for drafts never verified.)
  if (planned && !config_.speculate_always && !granted && !yield_guard_.allows(n_rows)) dp.decline();
  if (dp.declined) metrics_.spec_declined_ticks_total++;
  if (spdlog::should_log(spdlog::level::debug)) {
    spdlog::debug("tick {}: drafts for {} of {} decoding: {} rows{} (fill to {}); decode rows {:.2f} ms predicted, one draft row more "
                  "{:.3f} ms, fixed {:.2f} ms (overhead {:.2f}, draft call {:.2f}, catch-up {:.2f}), draft step {:.2f} ms, acceptance "
                  "{:.2f} (first offer); yield tok/ms plain {:.3f} verifying {:.3f}",
                  tick.tick_no + 1, who.size(), n_rows, dp.rows, planned && dp.rows == 0 ? " (the yield guard declined)" : "", in.fill_to,
                  in.tick_ms(0), in.tick_ms(1) - in.tick_ms(0), in.fixed_ms, overhead_ms, call_ms, catch_up_ms,
                  n_model > 0 ? drafter_->step_ms(static_cast<std::size_t>(n_model)) : 0.0, offers.front().accept,
                  yield_guard_.plain_rate(n_rows), yield_guard_.spec_rate(n_rows));
  }
  return dp;
}

// A verifying tick is every decoding stream's next gap: its draft rows may add at most
// (kVerifyStretch - 1) plain ticks, however well they pay (at 4 streams on a CPU uncapped rows made
// a 518 ms gap where a tick takes 30). The plain tick is the predicted one, or where plain ticks
// are measured first (a CPU) the measured one if shorter: right after prompts the cost model's
// base can be twice the truth.
std::int32_t SpecPlanner::stretch_room(const SpecTickFacts& tick, std::int32_t room) const {
  const double base_ms = tick.tick_ms(0);
  const double plain_rate = tick.device ? 0.0 : yield_guard_.plain_rate(tick.decode_rows);
  const double plain_ms = plain_rate > 0 ? std::min(base_ms, static_cast<double>(tick.decode_rows) / plain_rate) : base_ms;
  const double extra_ms = (kVerifyStretch - 1) * plain_ms;
  std::int32_t lo = 0, hi = std::max(room, 0);
  while (lo < hi) {  // the most rows within it (the predicted time rises with rows)
    const std::int32_t mid = lo + (hi - lo + 1) / 2;
    if (tick.tick_ms(mid) - base_ms <= extra_ms) lo = mid; else hi = mid - 1;
  }
  return lo;
}

// Paid once whatever the drafts: the verifying tick's graphs, and a draft model's call.
double SpecPlanner::fixed_ms(const SpecTickFacts& tick, std::span<const SpecCandidate> who, double n_model, double* overhead,
                             double* call, double* catch_up) const {
  const std::size_t n_rows = tick.decode_rows;
  *overhead = std::max(0.0, overhead_ms_.value(n_rows));
  *call = n_model > 0 ? drafter_->call_ms(static_cast<std::size_t>(n_model)) : 0.0;
  // A draft model first feeds what it lacks of each sequence (a new request's prompt; what came
  // while ticks were declined): paid once, by the first verifying tick. The first measurement of a
  // bucket runs kProbeTicks ticks, so it must pay that off within them (on a GPU the first call
  // at 64 streams fed 5,000 prompt tokens in 120 ms, ten ticks' time, and verified once). Where
  // verifying was measured to lose, a tick that verifies is the guard's probe, and the guard's
  // spacing (32 ticks, doubling to 512) rations what probes cost: charged to the plan, the
  // catch-up grows with every declined tick and no probe ever pays again (on a GPU a lone
  // stream measured losing once, cold, then never verified: 166 ms charged after 400 tokens).
  std::size_t behind = 0;
  const auto steady = static_cast<std::size_t>(config_.draft_max) + 1;  // what a tick's call feeds anyway (call_ms)
  const bool charged = n_model > 0 && !yield_guard_.verifying_loses(n_rows);
  for (std::size_t k = 0; k < who.size() && charged; ++k) {
    const std::size_t lag = who[k].by_model ? drafter_->lag(who[k].session->seq, who[k].session->tokens) : 0;
    behind += lag > steady ? lag - steady : 0;
  }
  *catch_up = behind == 0 ? 0.0 : drafter_->catch_up_ms(behind) / SpecYieldGuard::kProbeTicks;
  // A prediction, which the guard's measurement overrules: where verifying ticks were measured to
  // out-yield plain ones (their drafting and calls included), the fixed cost declines no plan.
  if (yield_guard_.verifying_wins(n_rows)) return 0.0;
  return *overhead + *call + *catch_up;
}

// Per-sequence KV (llama.cpp's streams): a pass takes as many tokens from each sequence of a run of
// consecutive ids as the shortest has. When every decoding session verifies as many draft tokens,
// its rows stay one pass; otherwise each run of consecutive speculating ids with equal drafts is a
// pass of its own: weights read again, a graph built (a GPU's launch). The plan stands only if it
// still pays with those passes.
void SpecPlanner::check_passes(const SpecTickFacts& tick, const DraftPlanInput& in, std::span<const DraftOffer> offers,
                               std::span<const SpecCandidate> who, DraftPlan& dp) const {
  std::vector<std::pair<std::int32_t, std::int32_t>> by_seq;  // (sequence id, draft tokens)
  for (std::size_t k = 0; k < who.size(); ++k) by_seq.emplace_back(who[k].session->seq, dp.k[k]);
  std::sort(by_seq.begin(), by_seq.end());
  const bool everyone = who.size() == tick.decode_rows;
  const bool one_pass =
      everyone && std::all_of(by_seq.begin(), by_seq.end(), [&](const auto& e) { return e.second == by_seq.front().second; });
  int passes = 0;
  for (std::size_t k = 0; k < by_seq.size() && !one_pass; ++k) {
    if (by_seq[k].second == 0) continue;
    const bool joins = k > 0 && by_seq[k - 1].second == by_seq[k].second && by_seq[k - 1].first + 1 == by_seq[k].first;
    passes += joins ? 0 : 1;
  }
  auto plan_ms = [&](const DraftPlan& p) {  // its tick, fixed costs and drafting (pads draft nothing)
    double drafting = 0.0;
    for (std::size_t k = 0; k < offers.size(); ++k) drafting += offers[k].ms_per_token * p.proposed[k];
    return in.tick_ms(p.rows) + in.fixed_ms + drafting;
  };
  const double t0 = in.tick_ms(0), t = plan_ms(dp) + passes * tick.pass_ms;
  // Where every decoding stream drafts, the same K for all is one pass (at 16 streams copying on
  // a GPU the plan's 71 rows, 4 or 5 a stream, were ten passes, and speculation never ran;
  // with it, 1.22x). Not yet from 32 streams (spec_uniform_streams_below): traced at 64 copying
  // on a GPU, its verifying ticks paid (6.8 tok/ms against 4.7 plain) until the guard's
  // lower-arm trial held them at 63 rows (declined_under_cap mends that; docs/BENCHMARKS.md),
  // and the row has not been measured with the mend.
  DraftPlan uniform;
  if (!one_pass && everyone && who.size() < config_.spec_uniform_streams_below) uniform = plan_uniform_drafts(in);
  bool took_uniform = false;
  if (uniform.rows > 0) {
    took_uniform = uniform.expected_tokens * t > dp.expected_tokens * plan_ms(uniform);  // out-yields the passes
    if (took_uniform) dp = uniform;
  }
  if (!took_uniform && !(dp.expected_tokens * t0 > in.base_tokens * t)) dp.decline();
}

void SpecPlanner::make_drafts(const DraftPlan& dp, std::span<const SpecCandidate> who, const TimeSource& time,
                              std::uint64_t tick_no) {
  std::vector<DraftJob> jobs;
  for (std::size_t k = 0; k < who.size(); ++k) {
    Session& s = *who[k].session;
    if (dp.k[k] == 0) s.accept = idle_acceptance(s.accept);
    s.draft_proposed = static_cast<std::size_t>(dp.proposed[k]);
    if (who[k].by_model && dp.proposed[k] > 0) {
      jobs.push_back({s.seq, s.tokens, dp.proposed[k], &s.draft});
    } else {
      // Pads after a lookup's tokens (a uniform plan's rows): repeats of its last, verified as any.
      s.draft.resize(static_cast<std::size_t>(dp.k[k]), s.draft.empty() ? Token{} : s.draft.back());
    }
  }
  if (jobs.empty()) return;
  const Clock::time_point t0 = time.now();
  if (const Status st = drafter_->draft(jobs); !st.ok()) spdlog::warn("draft model: {} (no drafts this tick)", st.to_string());
  draft_ms_last_ = ms_between(t0, time.now());
  spdlog::debug("tick {}: the draft model drafted for {} sessions in {:.2f} ms", tick_no + 1, jobs.size(), draft_ms_last_);
  metrics_.spec_draft_ms_total = metrics_.spec_draft_ms_total.load() + draft_ms_last_;
  // The last call's bucket, once it has been measured (a catch-up call is no sample).
  if (const double step = drafter_->step_ms(jobs.size()); step > 0) metrics_.spec_draft_step_ms = step;
  if (const double call = drafter_->call_ms(jobs.size()); call > 0) metrics_.spec_draft_call_ms = call;
  // Pads after what the model proposed: rows of the plan's steady shape (a repeat of the last
  // proposal: verified as any draft, rarely accepted).
  for (std::size_t k = 0; k < who.size(); ++k) {
    std::vector<Token>& d = who[k].session->draft;
    who[k].session->draft_proposed = d.size();
    if (who[k].by_model && !d.empty()) d.resize(static_cast<std::size_t>(dp.k[k]), d.back());
  }
}

void SpecPlanner::observe_overhead(double excess_ms, bool verified, std::size_t decode_rows) {
  // Samples keep their sign (the model's noise averages out); the estimate is clamped at 0.
  if (excess_pending_.has_value()) {
    // The tick after a verifying one: a tick that verifies again kept the shape's cost to itself.
    const double sample = excess_pending_->ms + (verified ? 0.0 : excess_ms);
    overhead_ms_.add(excess_pending_->rows, sample);
    metrics_.spec_overhead_ms = std::max(0.0, overhead_ms_.value(excess_pending_->rows));
    excess_pending_.reset();
  }
  if (verified) excess_pending_ = ExcessPending{excess_ms, decode_rows};
}

void SpecPlanner::observe_yield(const TickYield& t) {
  // Where ticks are pipelined, what speculation competes with is a pipelined plain tick: a plain
  // one that was not (the first after a verifying tick) would make plain ticks look dearer. And a
  // GPU runs a decode of a new shape (rows) without a graph, captures it the next time, replays it
  // from the third: a verifying tick is a sample from the third of its shape in a row (the
  // guard's probes are runs for that).
  shape_run_ = t.entries == last_shape_ ? shape_run_ + 1 : 1;
  last_shape_ = t.entries;
  const bool steady = t.drafts > 0 ? shape_run_ >= kSteadyShapeRun : t.pipelined;
  yield_pending_.open = !t.prefilled && t.decode_rows > 0 && (steady || !t.pipelining);
  if (yield_pending_.open) {
    yield_pending_.rows = t.decode_rows;
    yield_pending_.drafts = t.drafts;
    yield_pending_.tokens = t.tokens;
    spdlog::debug("tick {}: {} tokens from {} decode rows and {} draft rows, decode {:.2f} ms, drafting {:.2f} ms", t.tick_no,
                  yield_pending_.tokens, t.decode_rows, yield_pending_.drafts, t.decode_ms, draft_ms_last_);
  }
  draft_ms_last_ = 0.0;
}

void SpecPlanner::close_yield(Clock::time_point now, std::uint64_t tick_no) {
  const Clock::time_point entered = std::exchange(tick_entered_, now);
  // The last tick's period, unless it left no work: the compute loop then waited for some.
  if (!std::exchange(yield_pending_.open, false) || entered == Clock::time_point{}) return;
  const double period_ms = ms_between(entered, now);
  yield_guard_.observe(yield_pending_.rows, yield_pending_.drafts, yield_pending_.tokens, period_ms);
  spdlog::debug("tick {}: period {:.2f} ms", tick_no, period_ms);
}

bool SpecPlanner::declined_ahead(std::size_t rows) {
  if (plan_declined_bucket_ == SpecYieldGuard::bucket_of(rows) && ++ticks_since_plan_ < SpecYieldGuard::kProbeFirst) return true;
  if (!yield_guard_.allows(rows)) return true;
  granted_ = true;
  return false;
}

}  // namespace uma
