// SpecPlanner on synthetic ticks: the stretch a verifying tick may take, per-sequence KV's extra
// passes, and the pipelined tick's question after a declined plan.
#include "sched/spec_planner.h"

#include <gtest/gtest.h>

#include <deque>

namespace uma {
namespace {

struct Fixture {
  ServerMetrics metrics;
  SpecPlanner planner{{}, metrics};
  std::deque<Session> sessions;
  std::vector<SpecCandidate> who;
  std::vector<DraftOffer> offers;
  // A session on sequence `seq` offering `available` lookup drafts it is confident in.
  void offer(std::int32_t seq, std::int32_t available) {
    Session& s = sessions.emplace_back();
    s.seq = seq;
    s.n_past = 100;
    s.draft.assign(static_cast<std::size_t>(available), Token{7});
    who.push_back({&s, false});
    offers.push_back({available, 0.95});
  }
};

// A GPU-like tick (a decode's shape costs a graph): 10 ms, each row 0.5 ms more.
SpecTickFacts gpu_tick(std::size_t decode_rows, bool per_seq, double pass_ms) {
  SpecTickFacts t;
  t.decode_rows = decode_rows;
  t.room = 100;
  t.tick_ms = [](std::int32_t n) { return 10.0 + 0.5 * n; };
  t.device = true;
  t.per_seq = per_seq;
  t.pass_ms = pass_ms;
  return t;
}

TEST(SpecPlanner, AVerifyingTickTakesAtMostOnePlainTickMore) {
  Fixture f;
  f.offer(0, 64);
  f.offer(1, 64);
  const DraftPlan dp = f.planner.plan(gpu_tick(2, /*per_seq=*/false, 0), f.offers, f.who);
  EXPECT_GT(dp.rows, 0) << "confident drafts at half a millisecond a row pay";
  EXPECT_LE(dp.rows, 20) << "10 ms more at most: 20 rows of 0.5 ms";
}

TEST(SpecPlanner, PerSequenceKvPricesTheExtraPassesOfUnequalDrafts) {
  // Sequences 0 and 2 draft, 1 does not: their rows are passes of their own.
  for (const double pass_ms : {0.0, 1000.0}) {
    Fixture f;
    f.offer(0, 8);
    f.offer(2, 8);
    const DraftPlan dp = f.planner.plan(gpu_tick(3, /*per_seq=*/true, pass_ms), f.offers, f.who);
    if (pass_ms == 0.0) {
      EXPECT_GT(dp.rows, 0) << "free passes: the plan stands";
    } else {
      EXPECT_EQ(dp.rows, 0) << "a second of passes: declined";
      EXPECT_TRUE(dp.declined);
      EXPECT_TRUE(f.planner.declined_ahead(3)) << "a pipelined tick of as many rows verifies none either";
      EXPECT_FALSE(f.planner.declined_ahead(1)) << "another bucket of rows is not that plan's";
    }
  }
}

TEST(SpecPlanner, NewSessionsStartFromEverySessionsAcceptanceWithinBounds) {
  Fixture f;
  EXPECT_DOUBLE_EQ(f.planner.starting_acceptance(), kAcceptancePrior);
  for (int i = 0; i < 200; ++i) f.planner.note_verified(8, 0);
  EXPECT_DOUBLE_EQ(f.planner.starting_acceptance(), 0.1);
  for (int i = 0; i < 200; ++i) f.planner.note_verified(8, 8);
  EXPECT_DOUBLE_EQ(f.planner.starting_acceptance(), 0.9);
}

}  // namespace
}  // namespace uma
