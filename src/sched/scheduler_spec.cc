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
  std::vector<SpecCandidate> who;
  gather_offers(plan, rows_max, offers, who);
  if (offers.empty()) return;
  const DraftPlan dp = spec_.plan(spec_facts(who), offers, who);
  spec_.make_drafts(dp, who, time_, tick_no_);
  if (dp.rows > 0) build_batch(plan, order_, batch_);
}

void Scheduler::gather_offers(const TickPlan& plan, std::int32_t rows_max, std::vector<DraftOffer>& offers,
                              std::vector<SpecCandidate>& who) {
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
    if (s.draft.empty() && spec_.drafter() == nullptr) continue;
    offers.push_back({s.draft.empty() ? k : static_cast<std::int32_t>(s.draft.size()), s.accept});
    who.push_back({&s, s.draft.empty()});
  }
}

SpecTickFacts Scheduler::spec_facts(std::span<const SpecCandidate> who) const {
  SpecTickFacts f;
  f.decode_rows = batch_.decoded.size();
  f.device = decoder_.decode_is_async();
  f.per_seq = ledger_.per_seq();
  f.tick_no = tick_no_;
  // Draft rows join the tick as a chunk of their session: weight products like prompt tokens,
  // attention over the session's depth (the mean depth of those offering stands for each). The
  // base is the decode rows alone: a draft token must come cheaper than a token of theirs does
  // (a prompt chunk in the tick would make any row look cheap next to it).
  TickWork base = empty_work();
  for (const Session* s : batch_.decoded) add_decode_row(base, *s);
  double depth = 0;
  for (const SpecCandidate& c : who) depth += c.session->n_past;
  depth /= static_cast<double>(who.size());
  const double span = ledger_.per_seq() ? depth + 1 : unified_span_ + 1;
  f.tick_ms = [this, base, span](std::int32_t n) {
    TickWork w = base;
    w.tokens += n;
    w.span_cells += n * span;
    return cost_.predict_ms(w);
  };
  f.pass_ms = cost_.predict_ms({1, depth + 1, 1, depth});
  std::int32_t room = decoder_.n_ubatch() - static_cast<std::int32_t>(batch_.entries.size());
  if (!ledger_.per_seq()) room = std::min(room, cells_free() / 2);  // a draft's cells are back after the tick
  // Within the logits rows the decoder reserved (more would grow llama.cpp's buffer mid-tick).
  if (const std::int32_t reserved = decoder_.outputs_reserved(); reserved > 0) {
    room = std::min(room, reserved - static_cast<std::int32_t>(batch_.entries.size()));
  }
  f.room = room;
  return f;
}

void Scheduler::observe_spec_overhead(double excess_ms) {
  const bool verified = std::any_of(batch_.rows.begin(), batch_.rows.end(), [](const LogitsRow& r) { return r.draft > 0; });
  spec_.observe_overhead(excess_ms, verified, batch_.decoded.size());
}

void Scheduler::observe_yield(double decode_ms, bool pipelined) {
  SpecPlanner::TickYield t;
  t.decode_rows = batch_.decoded.size();
  t.entries = batch_.entries.size();
  t.drafts = static_cast<std::int32_t>(std::count_if(batch_.rows.begin(), batch_.rows.end(), [](const LogitsRow& r) { return r.draft > 0; }));
  t.tokens = static_cast<double>(std::count_if(sampled_.begin(), sampled_.end(), [](Token tok) { return tok != kNotSampled; }));
  t.prefilled = !batch_.prefilled.empty();
  t.pipelined = pipelined;
  t.pipelining = config_.pipelined_ticks && decoder_.decode_is_async();
  t.decode_ms = decode_ms;
  t.tick_no = tick_no_;
  spec_.observe_yield(t);
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

bool Scheduler::may_draft(const Session& s) const {
  if (!s.speculate || decoder_.outputs_per_sequence() == 1 || (!cost_.warm() && !config_.speculate_always)) return false;
  return spec_.drafter() != nullptr || !s.prediction.empty() || !lookup_draft(s.tokens, 1, config_.lookup).empty();
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
    spec_.note_verified(proposed, std::min(n, proposed));
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
