// Speculative decoding in the scheduler's tick (the policy is sched/speculation.h): drafts for the
// planned decode rows, the verifying samples, and the rejected tokens' KV taken back.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <limits>
#include <utility>

#include "sched/scheduler.h"

namespace uma {

void Scheduler::plan_speculation(const TickPlan& plan) {
  if (plan.decode.empty() || (!cost_.warm() && !config_.speculate_always)) return;
  // Prompts in the tick: drafting would delay them, and a draft row would look cheap next to a
  // chunk (measured at 16 streams on a CPU: TTFT up 30%).
  if (!batch_.prefilled.empty() && !config_.speculate_always) return;
  // A decoder that samples one row per sequence (the GPU's device sampling told so) cannot verify.
  const std::int32_t rows_max = decoder_.outputs_per_sequence();
  if (rows_max == 1) return;
  std::vector<DraftOffer> offers;
  std::vector<Session*> who;
  std::vector<bool> by_model;  // offer k's drafts are still to be made by the draft model
  for (std::size_t i : plan.decode) {
    Session& s = *order_[i];
    if (!s.speculate) continue;
    // Drafts never run past max_tokens nor the sequence's room.
    std::int32_t k = std::min(config_.draft_max, s.max_tokens - s.generated - 1);
    k = std::min(k, decoder_.n_ctx_seq() - s.n_past - 2);
    if (rows_max > 0) k = std::min(k, rows_max - 1);
    if (k <= 0) continue;
    // The client's prediction first, then a lookup (both cost nothing to make); the draft model
    // drafts where neither finds any.
    s.draft.clear();
    if (!s.prediction.empty()) {
      const std::span<const Token> output(s.tokens.data() + s.tokens.size() - static_cast<std::size_t>(s.generated),
                                          static_cast<std::size_t>(s.generated));
      s.draft = prediction_draft(output, s.prediction, k, &s.prediction_at, config_.lookup);
    }
    s.draft_from_prediction = !s.draft.empty();
    if (s.draft.empty()) s.draft = lookup_draft(s.tokens, k, config_.lookup);
    if (s.draft.empty() && drafter_ == nullptr) continue;
    offers.push_back({s.draft.empty() ? k : static_cast<std::int32_t>(s.draft.size()), s.accept});
    by_model.push_back(s.draft.empty());
    who.push_back(&s);
  }
  if (offers.empty()) return;
  // The draft model's steps are shared by the sessions drafting together.
  const auto n_model = static_cast<double>(std::count(by_model.begin(), by_model.end(), true));
  for (std::size_t k = 0; k < offers.size(); ++k) {
    if (by_model[k]) offers[k].ms_per_token = drafter_->step_ms(static_cast<std::size_t>(n_model)) / n_model;
  }
  // Draft rows join the tick as a chunk of their session: weight products like prompt tokens,
  // attention over the session's depth (the mean depth of those offering stands for each). The
  // base is the decode rows alone: a draft token must come cheaper than a token of theirs does
  // (a prompt chunk in the tick would make any row look cheap next to it).
  TickWork base = empty_work();
  for (const Session* s : batch_.decoded) add_decode_row(base, *s);
  double depth = 0;
  for (const Session* s : who) depth += s->n_past;
  depth /= static_cast<double>(who.size());
  auto tick_ms = [&](std::int32_t n) {
    TickWork w = base;
    w.tokens += n;
    w.span_cells += n * (ledger_.per_seq() ? depth + 1 : unified_span_ + 1);
    return cost_.predict_ms(w);
  };
  std::int32_t room = decoder_.n_ubatch() - static_cast<std::int32_t>(batch_.entries.size());
  if (!ledger_.per_seq()) room = std::min(room, cells_free() / 2);  // a draft's cells are back after the tick
  // Within the logits rows the decoder reserved (more would grow llama.cpp's buffer mid-tick).
  if (const std::int32_t reserved = decoder_.outputs_reserved(); reserved > 0) {
    room = std::min(room, reserved - static_cast<std::int32_t>(batch_.entries.size()));
  }
  const std::int32_t cap = config_.speculate_always ? room : yield_guard_.max_draft_rows(batch_.decoded.size());
  room = std::min(room, cap);
  // A verifying tick is every decoding stream's next gap: its draft rows may add at most
  // (kVerifyStretch - 1) plain ticks, however well they pay (at 4 streams on a CPU uncapped
  // rows made a 518 ms gap where a tick takes 30). The plain tick is the predicted one, or where
  // plain ticks are measured first (a CPU) the measured one if shorter: right after prompts the
  // cost model's base can be twice the truth.
  yield_guard_.set_plain_first(!decoder_.decode_is_async());
  if (!config_.speculate_always) {
    const double base_ms = tick_ms(0);
    const double plain_rate = decoder_.decode_is_async() ? 0.0 : yield_guard_.plain_rate(batch_.decoded.size());
    const double plain_ms = plain_rate > 0 ? std::min(base_ms, static_cast<double>(batch_.decoded.size()) / plain_rate) : base_ms;
    const double extra_ms = (kVerifyStretch - 1) * plain_ms;
    std::int32_t lo = 0, hi = std::max(room, 0);
    while (lo < hi) {  // the most rows within it (the predicted time rises with rows)
      const std::int32_t mid = lo + (hi - lo + 1) / 2;
      if (tick_ms(mid) - base_ms <= extra_ms) lo = mid; else hi = mid - 1;
    }
    room = lo;
  }
  DraftPlanInput in{offers, static_cast<double>(batch_.decoded.size()), tick_ms, room};
  // Paid once whatever the drafts: the verifying tick's graphs, and a draft model's call.
  const std::size_t n_rows = batch_.decoded.size();
  const double overhead_ms = std::max(0.0, spec_overhead_ms_.value(n_rows));
  const double call_ms = n_model > 0 ? drafter_->call_ms(static_cast<std::size_t>(n_model)) : 0.0;
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
    const std::size_t lag = by_model[k] ? drafter_->lag(who[k]->seq, who[k]->tokens) : 0;
    behind += lag > steady ? lag - steady : 0;
  }
  const double catch_up_ms = behind == 0 ? 0.0 : drafter_->catch_up_ms(behind) / SpecYieldGuard::kProbeTicks;
  in.fixed_ms = overhead_ms + call_ms + catch_up_ms;
  // A prediction, which the guard's measurement overrules: where verifying ticks were measured to
  // out-yield plain ones (their drafting and calls included), the fixed cost declines no plan.
  if (yield_guard_.verifying_wins(n_rows)) in.fixed_ms = 0.0;
  // On a GPU a decode of a new shape is captured as a new CUDA graph, and the next one again: a
  // steady number of draft rows (the best measured arm's top) is worth more than each row's margin.
  // Before the guard has an arm for this bucket, the top of the arm the plan falls in.
  if (decoder_.decode_is_async()) {
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
  if (ledger_.per_seq() && dp.rows > 0 && !config_.speculate_always) {
    // Per-sequence KV (llama.cpp's streams): a pass takes as many tokens from each sequence of a
    // run of consecutive ids as the shortest has. When every decoding session verifies as many
    // draft tokens, its rows stay one pass; otherwise each run of consecutive speculating ids
    // with equal drafts is a pass of its own: weights read again, a graph built (a GPU's launch).
    // The plan stands only if it still pays with those passes.
    std::vector<std::pair<std::int32_t, std::int32_t>> by_seq;  // (sequence id, draft tokens)
    for (std::size_t k = 0; k < who.size(); ++k) by_seq.emplace_back(who[k]->seq, dp.k[k]);
    std::sort(by_seq.begin(), by_seq.end());
    const bool one_pass = who.size() == batch_.decoded.size() &&
                          std::all_of(by_seq.begin(), by_seq.end(), [&](const auto& e) { return e.second == by_seq.front().second; });
    int passes = 0;
    for (std::size_t k = 0; k < by_seq.size() && !one_pass; ++k) {
      if (by_seq[k].second == 0) continue;
      const bool joins = k > 0 && by_seq[k - 1].second == by_seq[k].second && by_seq[k - 1].first + 1 == by_seq[k].first;
      passes += joins ? 0 : 1;
    }
    const double pass_ms = cost_.predict_ms({1, depth + 1, 1, depth});
    auto plan_ms = [&](const DraftPlan& p) {  // its tick, fixed costs and drafting (pads draft nothing)
      double drafting = 0.0;
      for (std::size_t k = 0; k < offers.size(); ++k) drafting += offers[k].ms_per_token * p.proposed[k];
      return in.tick_ms(p.rows) + in.fixed_ms + drafting;
    };
    const double t0 = in.tick_ms(0), t = plan_ms(dp) + passes * pass_ms;
    // Where every decoding stream drafts, the same K for all is one pass (at 16 streams copying on
    // a GPU the plan's 71 rows, 4 or 5 a stream, were ten passes, and speculation never ran;
    // with it, 1.22x). Not yet from 32 streams (spec_uniform_streams_below): traced at 64 copying
    // on a GPU, its verifying ticks paid (6.8 tok/ms against 4.7 plain) until the guard's
    // lower-arm trial held them at 63 rows (declined_under_cap mends that; docs/BENCHMARKS.md),
    // and the row has not been measured with the mend.
    DraftPlan uniform;
    if (!one_pass && who.size() == batch_.decoded.size() && who.size() < config_.spec_uniform_streams_below) uniform = plan_uniform_drafts(in);
    bool took_uniform = false;
    if (uniform.rows > 0) {
      took_uniform = uniform.expected_tokens * t > dp.expected_tokens * plan_ms(uniform);  // out-yields the passes
      if (took_uniform) dp = uniform;
    }
    if (!took_uniform && !(dp.expected_tokens * t0 > in.base_tokens * t)) dp.decline();
  }
  // A declined plan samples none of the costs that declined it: they drift back, so that a stale
  // estimate (a cold first draft step, a shared CPU's drifting speed) is tried again. Where drafts
  // really do not pay, the yield guard's measurement then declines them, its probes ever rarer.
  if (dp.declined && !config_.speculate_always) {
    yield_guard_.declined_under_cap(n_rows);
    if (in.fixed_ms > 0) spec_overhead_ms_.decay(n_rows, 0.95);
    if (n_model > 0) drafter_->decay_costs(static_cast<std::size_t>(n_model), 0.8);
  }
  const bool planned = dp.rows > 0;
  if (planned && decoder_.decode_is_async()) yield_guard_.pin(batch_.decoded.size(), dp.rows);
  plan_declined_bucket_ = planned ? 0 : SpecYieldGuard::bucket_of(batch_.decoded.size());
  ticks_since_plan_ = 0;
  const bool granted = std::exchange(spec_granted_, false);
  // (The plan's proposals go too: a draft model drafting for a declined tick cost 12 ms a tick at
  // 16 streams on a CPU, for drafts never verified.)
  if (planned && !config_.speculate_always && !granted && !yield_guard_.allows(batch_.decoded.size())) dp.decline();
  if (dp.declined) metrics_.spec_declined_ticks_total++;
  if (spdlog::should_log(spdlog::level::debug)) {
    const std::size_t n = batch_.decoded.size();
    spdlog::debug("tick {}: drafts for {} of {} decoding: {} rows{} (fill to {}); decode rows {:.2f} ms predicted, one draft row more "
                  "{:.3f} ms, fixed {:.2f} ms (overhead {:.2f}, draft call {:.2f}, catch-up {:.2f}), draft step {:.2f} ms, acceptance "
                  "{:.2f} (first offer); yield tok/ms plain {:.3f} verifying {:.3f}",
                  tick_no_ + 1, who.size(), n, dp.rows, planned && dp.rows == 0 ? " (the yield guard declined)" : "", in.fill_to,
                  in.tick_ms(0), in.tick_ms(1) - in.tick_ms(0), in.fixed_ms, overhead_ms, call_ms, catch_up_ms,
                  n_model > 0 ? drafter_->step_ms(static_cast<std::size_t>(n_model)) : 0.0, offers.front().accept,
                  yield_guard_.plain_rate(n), yield_guard_.spec_rate(n));
  }
  std::vector<DraftJob> jobs;
  for (std::size_t k = 0; k < who.size(); ++k) {
    if (dp.k[k] == 0) who[k]->accept = idle_acceptance(who[k]->accept);
    who[k]->draft_proposed = static_cast<std::size_t>(dp.proposed[k]);
    if (by_model[k] && dp.proposed[k] > 0) {
      jobs.push_back({who[k]->seq, who[k]->tokens, dp.proposed[k], &who[k]->draft});
    } else {
      // Pads after a lookup's tokens (a uniform plan's rows): repeats of its last, verified as any.
      std::vector<Token>& d = who[k]->draft;
      d.resize(static_cast<std::size_t>(dp.k[k]), d.empty() ? Token{} : d.back());
    }
  }
  if (!jobs.empty()) {
    const Clock::time_point t0 = time_.now();
    if (const Status st = drafter_->draft(jobs); !st.ok()) spdlog::warn("draft model: {} (no drafts this tick)", st.to_string());
    draft_ms_last_ = ms_between(t0, time_.now());
    spdlog::debug("tick {}: the draft model drafted for {} sessions in {:.2f} ms", tick_no_ + 1, jobs.size(), draft_ms_last_);
    metrics_.spec_draft_ms_total = metrics_.spec_draft_ms_total.load() + draft_ms_last_;
    // The last call's bucket, once it has been measured (a catch-up call is no sample).
    if (const double step = drafter_->step_ms(jobs.size()); step > 0) metrics_.spec_draft_step_ms = step;
    if (const double call = drafter_->call_ms(jobs.size()); call > 0) metrics_.spec_draft_call_ms = call;
    // Pads after what the model proposed: rows of the plan's steady shape (a repeat of the last
    // proposal: verified as any draft, rarely accepted).
    for (std::size_t k = 0; k < who.size(); ++k) {
      std::vector<Token>& d = who[k]->draft;
      who[k]->draft_proposed = d.size();
      if (by_model[k] && !d.empty()) d.resize(static_cast<std::size_t>(dp.k[k]), d.back());
    }
  }
  if (dp.rows > 0) build_batch(plan, order_, batch_);
}

void Scheduler::observe_spec_overhead(double excess_ms) {
  const bool verified = std::any_of(batch_.rows.begin(), batch_.rows.end(), [](const LogitsRow& r) { return r.draft > 0; });
  // Samples keep their sign (the model's noise averages out); the estimate is clamped at 0.
  if (spec_excess_pending_.has_value()) {
    // The tick after a verifying one: a tick that verifies again kept the shape's cost to itself.
    const double sample = spec_excess_pending_->ms + (verified ? 0.0 : excess_ms);
    spec_overhead_ms_.add(spec_excess_pending_->rows, sample);
    metrics_.spec_overhead_ms = std::max(0.0, spec_overhead_ms_.value(spec_excess_pending_->rows));
    spec_excess_pending_.reset();
  }
  if (verified) spec_excess_pending_ = ExcessPending{excess_ms, batch_.decoded.size()};
}

void Scheduler::observe_yield(double decode_ms, bool pipelined) {
  const std::size_t rows = batch_.decoded.size();
  const auto drafts = static_cast<std::int32_t>(std::count_if(batch_.rows.begin(), batch_.rows.end(), [](const LogitsRow& r) { return r.draft > 0; }));
  // Where ticks are pipelined, what speculation competes with is a pipelined plain tick: a plain
  // one that was not (the first after a verifying tick) would make plain ticks look dearer. And a
  // GPU runs a decode of a new shape (rows) without a graph, captures it the next time, replays it
  // from the third: a verifying tick is a sample from the third of its shape in a row (the
  // guard's probes are runs for that).
  const bool pipelining = config_.pipelined_ticks && decoder_.decode_is_async();
  shape_run_ = batch_.entries.size() == last_shape_ ? shape_run_ + 1 : 1;
  last_shape_ = batch_.entries.size();
  const bool steady = drafts > 0 ? shape_run_ >= kSteadyShapeRun : pipelined;
  yield_pending_.open = batch_.prefilled.empty() && rows > 0 && (steady || !pipelining);
  if (yield_pending_.open) {
    yield_pending_.rows = rows;
    yield_pending_.drafts = drafts;
    yield_pending_.tokens = static_cast<double>(std::count_if(sampled_.begin(), sampled_.end(), [](Token t) { return t != kNotSampled; }));
    spdlog::debug("tick {}: {} tokens from {} decode rows and {} draft rows, decode {:.2f} ms, drafting {:.2f} ms", tick_no_,
                  yield_pending_.tokens, rows, yield_pending_.drafts, decode_ms, draft_ms_last_);
  }
  draft_ms_last_ = 0.0;
}

void Scheduler::close_yield(Clock::time_point now) {
  const Clock::time_point entered = std::exchange(tick_entered_, now);
  // The last tick's period, unless it left no work: the compute loop then waited for some.
  if (!std::exchange(yield_pending_.open, false) || entered == Clock::time_point{}) return;
  const double period_ms = ms_between(entered, now);
  yield_guard_.observe(yield_pending_.rows, yield_pending_.drafts, yield_pending_.tokens, period_ms);
  spdlog::debug("tick {}: period {:.2f} ms", tick_no_, period_ms);
}

void Scheduler::take_prediction(Session& s, std::string_view text) {
  // Tokens as an output would be: without the BOS a prompt gets, at most a sequence's room.
  std::vector<Token> bos;
  if (decoder_.tokenize("", bos).ok() && decoder_.tokenize(text, s.prediction).ok()) {
    if (!bos.empty() && s.prediction.size() >= bos.size() && std::equal(bos.begin(), bos.end(), s.prediction.begin())) {
      s.prediction.erase(s.prediction.begin(), s.prediction.begin() + static_cast<std::ptrdiff_t>(bos.size()));
    }
    s.prediction.resize(std::min(s.prediction.size(), static_cast<std::size_t>(decoder_.n_ctx_seq())));
  } else {
    s.prediction.clear();  // a draft source only: a text it cannot tokenize changes nothing else
  }
}

bool Scheduler::spec_declined_ahead(std::size_t rows) {
  if (plan_declined_bucket_ == SpecYieldGuard::bucket_of(rows) && ++ticks_since_plan_ < SpecYieldGuard::kProbeFirst) return true;
  if (!yield_guard_.allows(rows)) return true;
  spec_granted_ = true;
  return false;
}

bool Scheduler::may_draft(const Session& s) const {
  if (!s.speculate || decoder_.outputs_per_sequence() == 1 || (!cost_.warm() && !config_.speculate_always)) return false;
  return drafter_ != nullptr || !s.prediction.empty() || !lookup_draft(s.tokens, 1, config_.lookup).empty();
}

void Scheduler::sample_batch() {
  sampled_.clear();
  const Session* chain = nullptr;  // the session whose draft rows are being verified
  bool accepted = false;           // its last sampled token was the next draft token
  for (const LogitsRow& row : batch_.rows) {
    Session& s = *row.session;
    if (row.draft > 0 && !(chain == &s && accepted)) {
      sampled_.push_back(kNotSampled);  // after a rejected draft token: never sampled
      continue;
    }
    const Token t = decoder_.sample(s.seq, row.batch_index);
    sampled_.push_back(t);
    chain = &s;
    accepted = static_cast<std::size_t>(row.draft) < s.draft.size() && t == s.draft[static_cast<std::size_t>(row.draft)];
    if (s.sampling.logprobs >= 0) {
      note_logprobs(s, row.batch_index, t);
    } else if (s.sampling.report_tokens && !ends_generation(s, t)) {
      s.pending_logprobs.push_back(LogprobEntry{TokenLogprob{t, {}, 0.0f}, {}});
    }
  }
  // The rejected tokens' cells go before anything else can see them.
  std::int32_t drafted = 0, taken = 0;
  for (std::size_t i = 0; i < batch_.rows.size(); ++i) {
    const LogitsRow& row = batch_.rows[i];
    Session& s = *row.session;
    if (row.draft != 0 || s.draft.empty()) continue;
    std::int32_t n = 0;  // draft tokens accepted: the draft rows that were sampled
    for (std::size_t k = i + 1; k < batch_.rows.size() && batch_.rows[k].session == &s; ++k) n += sampled_[k] != kNotSampled;
    const auto k = static_cast<std::int32_t>(s.draft.size());
    if (n < k) decoder_.trim_sequence(s.seq, s.n_past + 1 + n);
    // The acceptance is the proposals' (a pad's rejection says nothing of the drafts).
    const auto proposed = static_cast<std::int32_t>(std::min(s.draft_proposed, s.draft.size()));
    s.accept = update_acceptance(s.accept, proposed, std::min(n, proposed));
    spec_accept_ = update_acceptance(spec_accept_, proposed, std::min(n, proposed));
    if (s.draft_from_prediction) {
      s.prediction_accepted += n;
      s.prediction_rejected += k - n;
    }
    s.speculated = true;
    drafted += k;
    taken += n;
    metrics_.spec_verifications_total++;
  }
  if (drafted > 0) {
    metrics_.spec_ticks_total++;
    metrics_.spec_drafted_total += static_cast<std::uint64_t>(drafted);
    metrics_.spec_accepted_total += static_cast<std::uint64_t>(taken);
  }
}

}  // namespace uma
