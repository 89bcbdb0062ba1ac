// Speculative decoding's policy: where drafts come from and how many a tick verifies. Pure
// functions over tokens and numbers, tested without a model; the Scheduler carries them out.
//
// How a draft is verified (scheduler.cc): a decoding session feeds its last token and K draft
// tokens in one tick, logits on all K+1 rows. Its rows are sampled in order with its own sampler
// chain and compared: while the token sampled from row i equals draft token i+1 the next row is
// sampled too; the first that differs (or row K) ends it. Every sampled token is emitted, so a
// tick yields 1..K+1 tokens, and the rows after the first mismatch are never sampled: the
// sampler's state (RNG draws, penalty history, grammar) sees exactly the tokens a non-speculating
// run would, in the same order. With greedy sampling the output is the one without speculation;
// with seeded sampling too, row for row (up to llama.cpp's batch-shape rounding). For a draft
// that is a single proposal (prompt lookup, a greedy draft model) this "sample and compare" rule
// accepts draft token d with probability p(d), the same as the rejection rule of Leviathan et al.
// with a one-point draft distribution, and it keeps the target distribution exactly. The KV cells
// of rejected rows are removed (Decoder::trim_sequence) before anything else touches the sequence.
//
//   lookup_draft  prompt lookup: the tokens that followed the latest earlier occurrence of the
//                 sequence's last n tokens (the longest n from n_max down to n_min that occurs)
//   prediction_draft  a client's expected output (OpenAI's `prediction`): what follows where the
//                 output aligns with it, taken up again after an edit
//   plan_uniform_drafts  the same number for every session, for per-sequence KV
//   plan_drafts   how many draft tokens each session verifies this tick: a draft token is worth
//                 the probability that it and those before it are accepted (tokens), and costs
//                 the rows it adds to the tick (ms, from the cost model); tokens are added, best
//                 first, while the tick's expected tokens per ms rises. Many streams on a GPU
//                 (compute-bound: a row costs as much as it brings) turn speculation off by
//                 themselves; a lone stream (memory-bound: a row is almost free) turns it on.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "serve/token.h"

namespace uma {

struct LookupConfig {
  std::int32_t n_min = 2;       // shortest suffix looked up
  std::int32_t n_max = 4;       // longest
  std::int32_t window = 16384;  // only the last `window` tokens are searched (a bound on the scan)
};

// Up to `k_max` tokens that followed the latest earlier occurrence of the last n tokens of
// `tokens` (n as long as found, n_max first). Empty when none occurs or k_max <= 0.
std::vector<Token> lookup_draft(std::span<const Token> tokens, std::int32_t k_max, const LookupConfig& config);

// Up to `k_max` tokens of `prediction` (a client's expected output: OpenAI's `prediction`) that
// follow where `output` (the tokens generated so far) aligns with it: the prediction's start while
// the output is a prefix of it, else after the first occurrence at or past `*cursor` (else
// anywhere) of the output's last n tokens (n as long as found, n_max down to n_min), so that an
// edit in the middle is skipped and the prediction taken up again after it. `*cursor` is where the
// drafts left off (in the prediction), moved by each call. Empty when nothing aligns.
std::vector<Token> prediction_draft(std::span<const Token> output, std::span<const Token> prediction, std::int32_t k_max,
                                    std::size_t* cursor, const LookupConfig& config);

// One decoding session that could speculate this tick.
struct DraftOffer {
  std::int32_t available = 0;  // draft tokens it has, or may have drafted (its most useful K)
  double accept = 0.0;         // its estimated probability that one draft token is accepted
  double ms_per_token = 0.0;   // what drafting one token costs besides its row (a draft model's step)
};

struct DraftPlanInput {
  std::span<const DraftOffer> offers;
  double base_tokens = 0;  // tokens the tick yields without drafts (its decode rows)
  // Predicted tick ms with n draft rows added (n = 0: the tick as planned).
  std::function<double(std::int32_t n)> tick_ms;
  std::int32_t max_rows = 0;   // draft rows the tick may add at most (batch room, KV room)
  double min_accept = 0.05;    // a draft token less likely than this is never verified
  // A cost any drafts at all add, whatever their number (a GPU builds a graph for the new shape):
  // rows are still chosen by their marginal worth, then the plan stands only if the tick's
  // expected tokens per ms, this included, beat the decode rows' alone.
  double fixed_ms = 0;
  // Once the plan takes any rows, it takes more, best first, up to this many, however unlikely:
  // where a tick of a new shape costs a graph capture (a GPU), a steady number of draft rows is
  // worth more than the last row's margin. A filled row whose drafting costs more than its token
  // is worth (a draft model's step) is a pad: any token, not drafted, worth nothing but the shape.
  std::int32_t fill_to = 0;
  // Fill to the top of the power-of-two range the margin's rows fall in (1, 2-3, 4-7, ...: the
  // yield guard's arms), at most fill_to: where no arm is chosen yet, a few shapes rather than one
  // per number of rows.
  bool fill_to_arm_top = false;
};

struct DraftPlan {
  std::vector<std::int32_t> k;  // per offer: draft tokens to verify (0: none)
  std::vector<std::int32_t> proposed;  // per offer: of k, those to draft; the rest are pads (fill_to)
  std::int32_t rows = 0;        // their sum
  double expected_tokens = 0;   // the tick's expected yield with them
  bool declined = false;        // some offer had drafts, and the cost said no to all of them
  // Takes every row back (a later check said no): nothing verified, nothing to draft.
  void decline() {
    std::fill(k.begin(), k.end(), 0);
    std::fill(proposed.begin(), proposed.end(), 0);
    rows = 0;
    declined = true;
  }
};

DraftPlan plan_drafts(const DraftPlanInput& in);

// The same K draft rows for every offer (per-sequence KV: a pass takes as many tokens from each
// sequence as the shortest has, so only equal rows keep one pass): an offer with fewer than K
// tokens available is padded (rows that cost and are worth nothing), a pad never drafted. K
// ranges over 1..max_rows / offers; the best expected tokens per ms wins, or where fill_to > 0
// (a GPU: a steady shape) the largest K within it whose tick still beats the decode rows alone.
// Declined where no K does; min_accept and fill_to_arm_top play no part.
DraftPlan plan_uniform_drafts(const DraftPlanInput& in);

// A session's acceptance estimate after a verification: `accepted` of `drafted` tokens taken.
// An EWMA per draft token, so a long accepted run counts as much as its length.
double update_acceptance(double estimate, std::int32_t drafted, std::int32_t accepted);
// An offer the plan did not verify drifts back towards the prior, slowly: a session whose drafts
// were wrong for a while (its estimate too low to be verified) is tried again now and then, one
// token, instead of never (the text it copies may have changed).
double idle_acceptance(double estimate);
inline constexpr double kAcceptancePrior = 0.6;  // before a session's first verification

}  // namespace uma
