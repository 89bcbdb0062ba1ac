// Speculation policy on synthetic inputs: prompt lookup, how many draft tokens a tick verifies,
// and the acceptance estimate.
#include "sched/speculation.h"

#include <gtest/gtest.h>

namespace uma {
namespace {

TEST(LookupDraft, ProposesWhatFollowedTheLatestEarlierOccurrenceOfTheLongestSuffix) {
  const LookupConfig cfg{2, 4, 16384};
  // "1 2 3 4 5 | 9 | 1 2 3": the suffix 1 2 3 occurred at the start, followed by 4 5 9 1 ...
  const std::vector<Token> t = {1, 2, 3, 4, 5, 9, 1, 2, 3};
  EXPECT_EQ(lookup_draft(t, 3, cfg), (std::vector<Token>{4, 5, 9}));
  EXPECT_EQ(lookup_draft(t, 1, cfg), (std::vector<Token>{4}));
  EXPECT_TRUE(lookup_draft(t, 0, cfg).empty());
  // The draft stops at the end of what is known.
  EXPECT_EQ(lookup_draft(t, 50, cfg), (std::vector<Token>{4, 5, 9, 1, 2, 3}));
  // A longer match wins over a later shorter one: "7 2 3" later matches only "2 3".
  const std::vector<Token> u = {1, 2, 3, 8, 7, 2, 3, 6, 0, 1, 2, 3};
  EXPECT_EQ(lookup_draft(u, 2, cfg), (std::vector<Token>{8, 7}));
  // Of equal matches, the latest.
  const std::vector<Token> v = {5, 6, 1, 5, 6, 2, 5, 6};
  EXPECT_EQ(lookup_draft(v, 1, cfg), (std::vector<Token>{2}));
}

TEST(LookupDraft, NothingWithoutAMatchOfAtLeastNMinTokensOrOutsideTheWindow) {
  const LookupConfig cfg{2, 4, 16384};
  EXPECT_TRUE(lookup_draft(std::vector<Token>{1, 2, 3, 4, 5}, 4, cfg).empty());
  EXPECT_TRUE(lookup_draft(std::vector<Token>{1, 2, 9, 2}, 4, cfg).empty()) << "one token matching is below n_min";
  EXPECT_TRUE(lookup_draft(std::vector<Token>{}, 4, cfg).empty());
  EXPECT_TRUE(lookup_draft(std::vector<Token>{7}, 4, cfg).empty());
  // A run of one token repeats: "7 7 7" proposes 7.
  EXPECT_EQ(lookup_draft(std::vector<Token>{7, 7, 7}, 4, cfg), (std::vector<Token>{7}));
  std::vector<Token> far = {1, 2, 3};
  for (int k = 0; k < 100; ++k) far.push_back(1000 + k);
  far.push_back(1);
  far.push_back(2);
  EXPECT_EQ(lookup_draft(far, 1, cfg), (std::vector<Token>{3}));
  EXPECT_TRUE(lookup_draft(far, 1, LookupConfig{2, 4, 50}).empty()) << "the match lies before the window";
}

// A tick of `rows` decode rows costing `fixed` ms plus `per_row` ms a row, draft rows included.
DraftPlan plan(std::vector<DraftOffer> offers, double rows, double fixed, double per_row, std::int32_t max_rows = 64) {
  DraftPlanInput in{offers, rows, [=](std::int32_t n) { return fixed + per_row * (rows + n); }, max_rows};
  return plan_drafts(in);
}

TEST(PlanDrafts, ALoneStreamWhoseRowsAreCheapVerifiesItsDraftAnAcceptedOneMore) {
  // One stream, a 10 ms tick, a row 0.5 ms: a draft token accepted with 0.8 is worth it up to
  // where 0.8^k * t <= 0.5 * T.
  const DraftPlan p = plan({{8, 0.8}}, 1, 9.5, 0.5);
  EXPECT_EQ(p.k[0], 8);
  EXPECT_FALSE(p.declined);
  EXPECT_GT(p.expected_tokens, 3.0);
  // Rarely accepted: only the first few.
  const DraftPlan q = plan({{8, 0.3}}, 1, 9.5, 0.5);
  EXPECT_GT(q.k[0], 0);
  EXPECT_LT(q.k[0], 4);
  // Never accepted yet (below min_accept): nothing, and declined is not the cost's doing.
  EXPECT_EQ(plan({{8, 0.01}}, 1, 9.5, 0.5).rows, 0);
}

TEST(PlanDrafts, ManyStreamsOnAComputeBoundTickDeclineWhatALoneOneTakes) {
  // 64 streams, each row as dear as the fixed part per stream (compute-bound): a draft token
  // would have to be accepted more often than always to pay.
  std::vector<DraftOffer> offers(8, DraftOffer{8, 0.9});
  const DraftPlan p = plan(offers, 64, 0.5, 0.1);
  EXPECT_EQ(p.rows, 0);
  EXPECT_TRUE(p.declined);
  // The same offers with rows almost free (memory-bound): taken, most likely first, in budget.
  const DraftPlan q = plan(offers, 64, 6.0, 0.001, 20);
  EXPECT_EQ(q.rows, 20);
  for (std::int32_t k : q.k) EXPECT_GE(k, 2) << "the first tokens of every offer before anyone's later ones";
}

TEST(PlanDrafts, TheLikelierOfferGetsItsTokensFirst) {
  const DraftPlan p = plan({{8, 0.5}, {8, 0.95}}, 2, 10.0, 1.0);
  EXPECT_GT(p.k[1], p.k[0]);
  EXPECT_EQ(p.rows, p.k[0] + p.k[1]);
  // No more than an offer has.
  const DraftPlan q = plan({{2, 0.99}}, 1, 10.0, 0.01);
  EXPECT_EQ(q.k[0], 2);
}

TEST(PlanDrafts, AFixedCostOfDraftingIsPaidOnlyByPlansThatYieldEnough) {
  // A lone GPU stream: a 1.4 ms tick, rows nearly free, but a tick with drafts builds a graph
  // (3 ms more). Drafts accepted 0.6 of the time yield ~1.5 tokens: not worth 3 ms.
  auto with_fixed = [](double accept, double fixed_ms) {
    const std::vector<DraftOffer> offers{{16, accept}};
    DraftPlanInput in{offers, 1, [](std::int32_t n) { return 1.4 + 0.01 * (1 + n); }, 64};
    in.fixed_ms = fixed_ms;
    return plan_drafts(in);
  };
  EXPECT_GE(with_fixed(0.6, 0.0).k[0], 4) << "without the fixed cost every likely row pays";
  const DraftPlan low = with_fixed(0.6, 3.0);
  EXPECT_EQ(low.rows, 0);
  EXPECT_TRUE(low.declined);
  // A copy (accepted 0.95: ~8 tokens a tick) pays for it, with every row it would take anyway.
  const DraftPlan high = with_fixed(0.95, 3.0);
  EXPECT_EQ(high.k[0], 16);
  EXPECT_GT(high.expected_tokens * 1.41, 1.0 * (1.4 + 0.01 * 17 + 3.0));
}

TEST(PlanDrafts, FillsToASteadyNumberOfRowsWhenAskedWhileTheyStillPay) {
  // A lone stream whose rows cost 0.6 ms each next to a 4 ms tick, accepted 0.8 of the time: the
  // margin alone stops at 5 rows; asked to fill to 7, the plan takes 7.
  auto with_fill = [](double accept, std::int32_t fill_to, double row_ms) {
    const std::vector<DraftOffer> offers{{16, accept}};
    DraftPlanInput in{offers, 1, [row_ms](std::int32_t n) { return 4.0 + row_ms * n; }, 64};
    in.fill_to = fill_to;
    return plan_drafts(in);
  };
  const DraftPlan margin = with_fill(0.8, 0, 0.6);
  ASSERT_EQ(margin.rows, 5);
  const DraftPlan filled = with_fill(0.8, 7, 0.6);
  EXPECT_EQ(filled.rows, 7);
  EXPECT_GT(filled.expected_tokens, margin.expected_tokens);
  EXPECT_EQ(with_fill(0.8, 3, 0.6).rows, 5) << "never fewer than the margin takes";
  // The margin never takes tokens below min_accept (0.4^4 < 0.05); a fill does, for the shape.
  EXPECT_LE(with_fill(0.4, 0, 0.01).rows, 3);
  EXPECT_EQ(with_fill(0.4, 16, 0.01).rows, 16);
  // Filled rows that make the tick yield less than no drafts at all are left out.
  const DraftPlan dear = with_fill(0.8, 15, 2.0);
  EXPECT_EQ(dear.rows, 2);
  EXPECT_EQ(with_fill(0.8, 0, 2.0).rows, 2);
  // No drafts chosen: nothing to fill.
  EXPECT_EQ(with_fill(0.8, 7, 10.0).rows, 0);
}

TEST(PlanDrafts, AFillPadsWhereDraftingWouldCostAndNeverPadsAnOfferWithoutProposals) {
  // A draft model's offers (0.5 ms a drafted token), rows nearly free: the margin stops at what is
  // worth drafting; the fill to 7 rows adds pads, which cost their rows but no drafting, and are
  // worth nothing but the shape.
  auto plan = [](std::vector<DraftOffer> offers, std::int32_t fill_to) {
    DraftPlanInput in{offers, static_cast<double>(offers.size()), [](std::int32_t n) { return 4.0 + 0.01 * n; }, 64};
    in.fill_to = fill_to;
    return plan_drafts(in);
  };
  const DraftPlan margin = plan({{16, 0.5, 0.5}}, 0);
  ASSERT_GT(margin.rows, 0);
  ASSERT_LT(margin.rows, 7);
  EXPECT_EQ(margin.proposed, margin.k);
  const DraftPlan filled = plan({{16, 0.5, 0.5}}, 7);
  EXPECT_EQ(filled.rows, 7);
  EXPECT_EQ(filled.proposed[0], margin.k[0]) << "pads are not drafted";
  EXPECT_DOUBLE_EQ(filled.expected_tokens, margin.expected_tokens) << "and expected to yield nothing";
  // A lookup's tokens cost nothing to draft: a fill takes them, every one proposed.
  const DraftPlan lookup = plan({{16, 0.5, 0.0}}, 7);
  EXPECT_EQ(lookup.rows, 7);
  EXPECT_EQ(lookup.proposed[0], 7);
  EXPECT_GT(lookup.expected_tokens, margin.expected_tokens);
  // Two offers drafted at 0.5 ms a token, rows at 0.3 ms: the margin (paying for a row and its
  // drafting) takes 5 of the first (accepted 0.9) and none of the second (0.3). A fill to 15 pays
  // the rows anyway: it drafts the first's tokens while each is worth its drafting alone (to 10),
  // then pads; never the second alone.
  DraftPlanInput in2;
  const std::vector<DraftOffer> offers2{{16, 0.9, 0.5}, {16, 0.3, 0.5}};
  in2.offers = offers2;
  in2.base_tokens = 2;
  in2.tick_ms = [](std::int32_t n) { return 4.0 + 0.3 * n; };
  in2.max_rows = 64;
  const DraftPlan margin2 = plan_drafts(in2);
  ASSERT_EQ(margin2.k, (std::vector<std::int32_t>{5, 0}));
  in2.fill_to = 15;
  const DraftPlan two = plan_drafts(in2);
  EXPECT_EQ(two.k, (std::vector<std::int32_t>{15, 0}));
  EXPECT_EQ(two.proposed, (std::vector<std::int32_t>{10, 0}));
}

TEST(PlanUniformDrafts, EveryOfferVerifiesTheSameRowsAndAShortOneIsPadded) {
  // Three streams, a 10 ms tick, a row 0.1 ms: rows are cheap, so K runs to the room's 6 a
  // stream; the third has 2 tokens, its other 4 rows are pads (worth nothing, drafted by no one).
  const std::vector<DraftOffer> offers = {{8, 0.9}, {8, 0.9}, {2, 0.9}};
  DraftPlanInput in{offers, 3, [](std::int32_t n) { return 10.0 + 0.1 * (3 + n); }, 18};
  const DraftPlan p = plan_uniform_drafts(in);
  EXPECT_EQ(p.k, (std::vector<std::int32_t>{6, 6, 6}));
  EXPECT_EQ(p.proposed, (std::vector<std::int32_t>{6, 6, 2}));
  EXPECT_EQ(p.rows, 18);
  EXPECT_FALSE(p.declined);
  double six = 0, a = 1;
  for (int k = 1; k <= 6; ++k) six += (a *= 0.9);
  EXPECT_NEAR(p.expected_tokens, 3 + 2 * six + 0.9 + 0.81, 1e-9);
  // Less room than a row for each: nothing.
  in.max_rows = 2;
  EXPECT_TRUE(plan_uniform_drafts(in).declined);
}

TEST(PlanUniformDrafts, StopsWhereAnotherRowForEachCostsMoreThanItBringsAndDeclinesDearRows) {
  // A row 1 ms on a 10 ms tick at 0.4 acceptance: K = 1 yields 2.8 tokens in 12 ms, K = 2 3.12
  // in 14 (0.233 against 0.223 a ms), so K = 1.
  const std::vector<DraftOffer> offers = {{8, 0.4}, {8, 0.4}};
  DraftPlanInput in{offers, 2, [](std::int32_t n) { return 8.0 + 1.0 * (2 + n); }, 16};
  const DraftPlan p = plan_uniform_drafts(in);
  EXPECT_EQ(p.k, (std::vector<std::int32_t>{1, 1}));
  // Where a steady shape is asked for (fill_to), the largest K within it that still beats the
  // decode rows alone (0.2 a ms): K = 3 yields 3.248 tokens in 16 ms.
  in.fill_to = 6;
  EXPECT_EQ(plan_uniform_drafts(in).k, (std::vector<std::int32_t>{3, 3}));
  // A row as dear as the tick: no K pays.
  in.tick_ms = [](std::int32_t n) { return 10.0 * (2 + n); };
  in.fill_to = 0;
  const DraftPlan q = plan_uniform_drafts(in);
  EXPECT_TRUE(q.declined);
  EXPECT_EQ(q.rows, 0);
  EXPECT_EQ(q.k, (std::vector<std::int32_t>{0, 0}));
}

TEST(PredictionDraft, FollowsThePredictionAcrossAnEditAndPrefersWhatComesAfterTheCursor) {
  const LookupConfig cfg{2, 4, 16384};
  std::vector<Token> pred;
  for (Token t = 1; t <= 20; ++t) pred.push_back(t);
  std::size_t cursor = 0;
  // Nothing generated yet, or a prefix of the prediction: what follows it.
  EXPECT_EQ(prediction_draft({}, pred, 3, &cursor, cfg), (std::vector<Token>{1, 2, 3}));
  EXPECT_EQ(prediction_draft(std::vector<Token>{1, 2}, pred, 3, &cursor, cfg), (std::vector<Token>{3, 4, 5}));
  EXPECT_EQ(cursor, 2u);
  // An edit (4 5 replaced by 99 100): nothing aligns until the output is back on the prediction.
  EXPECT_TRUE(prediction_draft(std::vector<Token>{1, 2, 3, 99, 100}, pred, 3, &cursor, cfg).empty());
  EXPECT_EQ(prediction_draft(std::vector<Token>{1, 2, 3, 99, 100, 6, 7}, pred, 3, &cursor, cfg), (std::vector<Token>{8, 9, 10}));
  EXPECT_EQ(cursor, 7u);
  // The prediction's end: nothing more, and never past it.
  EXPECT_EQ(prediction_draft(std::vector<Token>{18, 19}, pred, 8, &cursor, cfg), (std::vector<Token>{20}));
  EXPECT_TRUE(prediction_draft(std::vector<Token>{19, 20}, pred, 8, &cursor, cfg).empty());
  // A repeated passage: the occurrence at or after the cursor wins over an earlier one.
  const std::vector<Token> rep = {5, 6, 7, 1, 5, 6, 7, 2};
  std::size_t at = 4;
  EXPECT_EQ(prediction_draft(std::vector<Token>{9, 5, 6, 7}, rep, 1, &at, cfg), (std::vector<Token>{2}));
  at = 0;
  EXPECT_EQ(prediction_draft(std::vector<Token>{9, 5, 6, 7}, rep, 1, &at, cfg), (std::vector<Token>{1}));
  EXPECT_TRUE(prediction_draft(std::vector<Token>{1}, {}, 4, &at, cfg).empty());
  EXPECT_TRUE(prediction_draft(std::vector<Token>{1}, pred, 0, &at, cfg).empty());
}

TEST(Acceptance, MovesTowardsWhatTheVerificationsShow) {
  double a = kAcceptancePrior;
  for (int k = 0; k < 10; ++k) a = update_acceptance(a, 8, 8);
  EXPECT_GT(a, 0.95);
  for (int k = 0; k < 10; ++k) a = update_acceptance(a, 8, 0);
  EXPECT_LT(a, 0.15);
  // Accepting 3 of 8: three successes and one failure tested; the rest never were.
  const double b = update_acceptance(0.5, 8, 3);
  EXPECT_GT(b, 0.5);
  EXPECT_LT(b, 0.7);
  // Left unverified, a low estimate climbs back over the verification floor, in tens of ticks.
  double c = 0.03;
  int ticks = 0;
  while (c < DraftPlanInput{}.min_accept && ticks < 1000) c = idle_acceptance(c), ++ticks;
  EXPECT_GT(ticks, 10);
  EXPECT_LT(ticks, 100);
  EXPECT_EQ(idle_acceptance(0.9), 0.9) << "a high one stays";
}

}  // namespace
}  // namespace uma
