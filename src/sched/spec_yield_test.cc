// SpecYieldGuard on synthetic yields: drafts while they pay, probes less and less where they do
// not, comes back when they pay again, and climbs to the number of draft rows that yields most.
#include "sched/spec_yield.h"

#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <utility>

namespace uma {
namespace {

// `ticks` ticks of `rows` decode rows whose plans would take `want` draft rows: the guard caps them
// and decides; `yield(draft_rows)` is what such a tick yields in tokens per ms. Returns how many
// ticks verified.
int run(SpecYieldGuard& g, std::size_t rows, std::int32_t want, const std::function<double(std::int32_t)>& yield, int ticks) {
  int verified = 0;
  for (int i = 0; i < ticks; ++i) {
    const std::int32_t k = std::min(want, g.max_draft_rows(rows));
    const bool v = g.allows(rows);
    verified += v;
    g.observe(rows, v ? k : 0, yield(v ? k : 0), 1.0);
  }
  return verified;
}

std::function<double(std::int32_t)> flat(double plain, double spec) {
  return [=](std::int32_t k) { return k > 0 ? spec : plain; };
}

TEST(SpecYieldGuard, PlainFirstMeasuresAPlainTickOfABucketOfManyRowsBeforeItVerifies) {
  SpecYieldGuard g;
  g.set_plain_first(true);
  EXPECT_TRUE(g.allows(1)) << "a lone stream verifies at once";
  EXPECT_TRUE(g.allows(3));
  EXPECT_FALSE(g.allows(16));
  g.observe(16, 8, 40.0, 100.0);  // a verifying sample is not the plain one it waits for
  EXPECT_FALSE(g.allows(16));
  g.observe(16, 0, 16.0, 70.0);
  EXPECT_TRUE(g.allows(16));
  SpecYieldGuard gpu;  // where shapes cost, verifying ticks are measured first
  EXPECT_TRUE(gpu.allows(16));
}

TEST(SpecYieldGuard, VerifyingLosesOnlyOnceBothKindsWereMeasuredAndPlainTicksYieldMore) {
  for (const double spec : {0.1, 0.2, 0.5}) {
    SpecYieldGuard g;
    EXPECT_FALSE(g.verifying_loses(16));
    g.observe(16, 8, spec * 10, 10.0);  // a verifying tick first: no plain ones to compare with
    EXPECT_FALSE(g.verifying_loses(16));
    for (int i = 0; i < SpecYieldGuard::kSamples; ++i) g.observe(16, 0, 3.0, 10.0);
    EXPECT_EQ(g.verifying_loses(16), spec < 0.15) << spec << ": one sample under half of plain's rate is evidence";
    for (int i = 1; i < SpecYieldGuard::kLoseSamples; ++i) g.observe(16, 8, spec * 10, 10.0);
    EXPECT_EQ(g.verifying_loses(16), spec < 0.3) << spec << ": kLoseSamples are";
    EXPECT_EQ(g.verifying_loses(20), spec < 0.3) << "the same bucket";
    EXPECT_FALSE(g.verifying_loses(1)) << "another bucket";
  }
}

TEST(SpecYieldGuard, AFewUnluckyFirstTicksDoNotDecideThatVerifyingLoses) {
  // A lone stream on a GPU: its first five verifying ticks accepted little (0.9x plain), its steady
  // ones yield 1.5x. Three samples would have declined drafts for a probe spacing and more.
  SpecYieldGuard g;
  int samples = 0;
  const int v = run(g, 1, 7, [&](std::int32_t k) { return k == 0 ? 1.0 : ++samples <= 5 ? 0.9 : 1.5; }, 300);
  constexpr int kCycle = SpecYieldGuard::kPlainEvery + SpecYieldGuard::kPlainRun;
  EXPECT_GT(v, 300 - SpecYieldGuard::kSamples - SpecYieldGuard::kPlainRun * (300 / kCycle + 1) - 2);
  EXPECT_FALSE(g.verifying_loses(1));
}

TEST(SpecYieldGuard, DraftsWhileVerifyingTicksYieldMoreAndKeepsBothRatesCurrent) {
  SpecYieldGuard g;
  const int v = run(g, 1, 4, flat(0.3, 0.5), 1000);
  // Three verifying samples, three plain ones, then kPlainRun plain ticks after kPlainEvery.
  constexpr int kCycle = SpecYieldGuard::kPlainEvery + SpecYieldGuard::kPlainRun;
  EXPECT_GT(v, 1000 - 3 - SpecYieldGuard::kPlainRun * (1000 / kCycle + 1) - 2);
  EXPECT_LT(v, 1000 - 3);
  EXPECT_NEAR(g.plain_rate(1), 0.3, 1e-9);
  EXPECT_NEAR(g.spec_rate(1), 0.5, 1e-9);
}

TEST(SpecYieldGuard, DeclinesWhereVerifyingLosesAndProbesLessAndLessOften) {
  SpecYieldGuard g;
  // kLoseSamples verifying ticks (3 of them before 3 plain ones), one of the arm below; probes 32,
  // 64, ... 512 ticks apart: 5 in the first 992 ticks, then one in 512, each a run of
  // kProbeSamples (all ticks are samples here).
  const int v = run(g, 16, 4, flat(1.0, 0.5), 10000);
  constexpr int kRun = SpecYieldGuard::kProbeSamples;
  EXPECT_GE(v, SpecYieldGuard::kLoseSamples + 5 * kRun);
  EXPECT_LE(v, SpecYieldGuard::kLoseSamples + 1 + kRun * (5 + 10000 / SpecYieldGuard::kProbeLast + 1));
  // Each bucket learns on its own: 16 rows lost, one row has no samples yet and may verify.
  EXPECT_TRUE(g.allows(1));
  EXPECT_EQ(g.spec_rate(1), 0.0);
  EXPECT_NEAR(g.spec_rate(17), g.spec_rate(31), 1e-12) << "16-31 rows share a bucket";
}

TEST(SpecYieldGuard, AProbeThatWinsBringsDraftsBack) {
  SpecYieldGuard g;
  run(g, 4, 4, flat(1.0, 0.5), 5000);  // speculation lost for a long while: probes 512 ticks apart
  // The workload changes (a copy): verifying now yields 3x. A probe within kProbeLast ticks
  // wins, probes come kProbeFirst apart again, and the verifying rate overtakes the plain one.
  int first = -1;
  for (int i = 0; i < 3000 && first < 0; ++i) {
    const bool v = g.allows(4);
    g.observe(4, v ? 4 : 0, v ? 3.0 : 1.0, 1.0);
    if (v && g.spec_rate(4) >= g.plain_rate(4)) first = i;
  }
  ASSERT_GE(first, 0) << "drafts never came back";
  EXPECT_LT(first, SpecYieldGuard::kProbeLast + 8 * SpecYieldGuard::kProbeFirst);
  constexpr int kCycle = SpecYieldGuard::kPlainEvery + SpecYieldGuard::kPlainRun;
  EXPECT_GT(run(g, 4, 4, flat(1.0, 3.0), 320), 320 - SpecYieldGuard::kPlainRun * (320 / kCycle + 1) - 2);
}

TEST(SpecYieldGuard, AProbeIsARunWhoseFirstVerifyingTickIsNoSample) {
  // A pipelined GPU: the scheduler samples neither the first verifying tick of a run nor the first
  // plain tick after one (each captures a new shape). Verifying lost for a long while; then the
  // workload changes and steady verifying ticks yield 1.5x. A lone-tick probe would never be
  // sampled, and drafts would never come back.
  SpecYieldGuard g;
  run(g, 16, 4, flat(1.0, 0.5), 3000);
  bool last_verified = false;
  int first = -1;
  for (int i = 0; i < 3000 && first < 0; ++i) {
    const bool v = g.allows(16);
    if (v == last_verified) g.observe(16, v ? 4 : 0, v ? 1.5 : 1.0, 1.0);
    last_verified = v;
    if (v && g.spec_rate(16) >= g.plain_rate(16)) first = i;
  }
  ASSERT_GE(first, 0) << "drafts never came back";
  EXPECT_LT(first, SpecYieldGuard::kProbeLast + 8 * SpecYieldGuard::kProbeFirst);
}

TEST(SpecYieldGuard, APinnedArmCapsTheRowsUntilAnArmHasSamples) {
  SpecYieldGuard g;
  EXPECT_GT(g.max_draft_rows(1), 1000) << "nothing measured, nothing pinned: the plan decides";
  g.pin(1, 5);
  EXPECT_EQ(g.max_draft_rows(1), 7) << "5 rows: the arm of 4-7";
  g.pin(1, 16);
  EXPECT_EQ(g.max_draft_rows(1), 7) << "the first pin holds";
  EXPECT_GT(g.max_draft_rows(16), 1000) << "each bucket its own";
  // Samples of the pinned arm and of plain ticks: from then on the hill climb decides.
  for (int i = 0; i < SpecYieldGuard::kArmSamples; ++i) g.observe(1, 7, 3.0, 1.0), g.observe(1, 0, 1.0, 1.0);
  EXPECT_EQ(g.max_draft_rows(1), 3) << "the arm below is measured next";
}

TEST(SpecYieldGuard, WhereThePlansRowsLoseFewerAreTriedBeforeDeclining) {
  // 16 decode rows on a GPU: 8 draft rows cost more than they add, 2-3 pay most.
  auto yield = [](std::int32_t k) { return k == 0 ? 1.0 : k >= 4 ? 0.8 : k == 1 ? 1.1 : 1.2; };
  SpecYieldGuard g;
  const int v = run(g, 16, 8, yield, 400);
  EXPECT_GT(v, 300) << "the lower arms were never tried";
  EXPECT_EQ(std::min(8, g.max_draft_rows(16)), 3);
  EXPECT_NEAR(g.spec_rate(16), 1.2, 1e-9);
}

TEST(SpecYieldGuard, ClimbsToTheDraftRowsThatYieldMost) {
  // A GPU-like yield: plain 0.32 tokens/ms; verifying pays most at 4-7 draft rows, less with more
  // (each row's drafting and the larger shape cost more than the tokens it adds).
  auto yield = [](std::int32_t k) {
    if (k == 0) return 0.32;
    if (k <= 1) return 0.30;
    if (k <= 3) return 0.38;
    if (k <= 7) return 0.43;
    if (k <= 15) return 0.36;
    return 0.34;
  };
  SpecYieldGuard g;
  run(g, 1, 16, yield, 400);  // the plan wants 16: measured, then lower arms tried
  int in_best = 0;
  for (int i = 0; i < 320; ++i) in_best += g.max_draft_rows(1) == 7;
  // Most of the time the best arm's top (7); a neighbour one time in kExploreEvery, for a run of
  // at most kProbeTicks (none of these ticks is observed, so each runs them all).
  EXPECT_GE(in_best, 320 - (320 / SpecYieldGuard::kExploreEvery + 1) * SpecYieldGuard::kProbeTicks);
  EXPECT_NEAR(g.spec_rate(1), 0.43, 1e-9);
  // Where more rows pay (a CPU: rows nearly free, drafts accepted), the cap stays above the plan.
  SpecYieldGuard cpu;
  run(cpu, 1, 16, [](std::int32_t k) { return k == 0 ? 0.1 : 0.1 + 0.01 * k; }, 400);
  EXPECT_GE(cpu.max_draft_rows(1), 15);
}

// Ticks away from the best arm's top (7 rows) among `ticks` more, yields as `yield`.
int explored_ticks(SpecYieldGuard& g, const std::function<double(std::int32_t)>& yield, int ticks, std::int32_t top = 7) {
  int away = 0;
  for (int i = 0; i < ticks; ++i) {
    const std::int32_t k = std::min(31, g.max_draft_rows(1));
    const bool v = g.allows(1);
    away += v && k != top;
    g.observe(1, v ? k : 0, yield(v ? k : 0), 1.0);
  }
  return away;
}

TEST(SpecYieldGuard, ExplorationsThatFindNothingBetterComeLessAndLessOftenAndAFindBringsThemBack) {
  // Plain 0.32 tokens/ms; 4-7 draft rows yield most.
  auto yield = [](std::int32_t k) { return k == 0 ? 0.32 : k <= 3 ? 0.38 : k <= 7 ? 0.43 : 0.36; };
  SpecYieldGuard g;
  run(g, 1, 31, yield, 600);
  ASSERT_NEAR(g.spec_rate(1), 0.43, 1e-9) << "settled on 4-7 rows";
  // Spacing 64 throughout would explore about 4000 / 64 = 62 times (2 ticks each, every tick a
  // sample here); doubling to 512 leaves a tenth or so.
  const int away = explored_ticks(g, yield, 4000);
  EXPECT_GT(away, 0) << "still explores";
  EXPECT_LT(away, 2 * (4000 / SpecYieldGuard::kExploreEvery) / 3);
  // The drafts turn better (acceptance rose): 8-15 rows now yield most. An exploration up finds
  // it within two of the longest spacings, and the climb goes on from there.
  auto better = [](std::int32_t k) { return k == 0 ? 0.32 : k <= 3 ? 0.38 : k <= 7 ? 0.43 : k <= 15 ? 0.55 : 0.40; };
  int ticks = 0;
  for (; g.spec_rate(1) < 0.5 && ticks < 3000; ++ticks) explored_ticks(g, better, 1);
  EXPECT_LE(ticks, 2 * SpecYieldGuard::kExploreLast + 2 * SpecYieldGuard::kProbeTicks);
  // Once moved, the spacing is back at its shortest: within 200 ticks the neighbours are tried.
  EXPECT_GT(explored_ticks(g, better, 200, 15), 0);
  EXPECT_NEAR(g.spec_rate(1), 0.55, 1e-9);
}

TEST(SpecYieldGuard, WherePipelinedTicksSampleTheThirdOfAShapeAnExplorationRunsUntilItIsMeasured) {
  // A lone stream on a GPU: only the third tick of a shape in a row is a sample. Each arm's first
  // three samples are cold (0.9x plain); then 1 draft row yields 1.2x, 2-3 rows 1.6x, 4-7 1.3x.
  // The cold samples lead the guard down to 1 row; an exploration up must run long enough to be
  // measured, or 2-3 rows are never seen at their 1.6x.
  SpecYieldGuard g;
  std::map<int, int> seen;  // samples by draft rows
  auto yield = [&](std::int32_t k) {
    if (k == 0) return 1.0;
    if (++seen[k] <= 3) return 0.9;
    return k == 1 ? 1.2 : k <= 3 ? 1.6 : 1.3;
  };
  std::int32_t last = -1, before = -2;
  int at_three = 0;
  constexpr int kTicks = 2000;
  for (int i = 0; i < kTicks; ++i) {
    const std::int32_t cap = g.max_draft_rows(1);
    const std::int32_t k = std::min<std::int32_t>({7, cap, std::max(1, g.steady_rows(1))});
    if (i == 0) g.pin(1, k);
    const std::int32_t rows = g.allows(1) ? k : 0;
    if (rows == last && last == before) g.observe(1, rows, yield(rows), 1.0);
    before = std::exchange(last, rows);
    at_three += i >= kTicks / 2 && rows == 3;
  }
  EXPECT_EQ(g.steady_rows(1), 3);
  EXPECT_GT(at_three, kTicks / 2 * 8 / 10) << "most of the second half at the best shape";
  EXPECT_NEAR(g.spec_rate(1), 1.6, 0.05);
}

TEST(SpecYieldGuard, TheSteadyRowsAreThePinnedArmsThenTheLeadersAndAWinIsMeasured) {
  SpecYieldGuard g;
  EXPECT_EQ(g.steady_rows(1), 0) << "nothing pinned nor measured";
  g.pin(1, 5);
  EXPECT_EQ(g.steady_rows(1), 7);
  // One verifying sample at 2 rows (arm 2-3), none plain: it leads, while the cap stays open.
  g.observe(1, 2, 3.0, 1.0);
  EXPECT_EQ(g.steady_rows(1), 3);
  EXPECT_FALSE(g.verifying_wins(1)) << "plain ticks not measured";
  for (int i = 0; i < SpecYieldGuard::kArmSamples; ++i) g.observe(1, 2, 3.0, 1.0);
  for (int i = 0; i < SpecYieldGuard::kSamples; ++i) g.observe(1, 0, 1.0, 1.0);
  EXPECT_TRUE(g.verifying_wins(1));
  EXPECT_EQ(g.steady_rows(1), 3);
  EXPECT_FALSE(g.verifying_wins(16)) << "each bucket its own";
  for (int i = 0; i < 40; ++i) g.observe(1, 0, 5.0, 1.0);
  EXPECT_FALSE(g.verifying_wins(1)) << "plain ticks now yield more";
}

TEST(SpecYieldGuard, ALowerArmNoPlanCanFillCountsAsPlainTicksAndTheBestArmKeepsVerifying) {
  // 64 streams drafting alike (a GPU copying: 64 + 64 rows gave 128 tokens in 18.6 ms, 64 plain
  // ones took 13.6): K = 1 is 64 draft rows, and a cap below that leaves no plan to verify.
  SpecYieldGuard g;
  const std::size_t rows = 64;
  for (int i = 0; i < SpecYieldGuard::kSamples; ++i) g.observe(rows, 0, 64.0, 13.6);
  int verified = 0, late = 0, capped_below = 0;
  for (int tick = 0; tick < 400; ++tick) {
    const std::int32_t cap = g.max_draft_rows(rows);
    if (cap < 64) {
      ++capped_below;
      g.declined_under_cap(rows);
      g.observe(rows, 0, 64.0, 13.6);
      continue;
    }
    const bool v = g.allows(rows);
    verified += v;
    late += v && tick >= 200;
    g.observe(rows, v ? 64 : 0, v ? 128.0 : 64.0, v ? 18.6 : 13.6);
  }
  // Without declined_under_cap the first trial of 32-63 rows held every later tick to 63.
  EXPECT_GT(late, 180) << "verified " << verified << ", capped below the plan " << capped_below;
  EXPECT_GT(g.spec_rate(rows), g.plain_rate(rows));
  // Explorations of the arm below still come (and find it plain), ever further apart.
  EXPECT_GT(capped_below, 1);
  EXPECT_LT(capped_below, 40);
}

TEST(SpecYieldGuard, APlanDeclinedUnderTheBestArmsCapLeavesTheArmsAsTheyAre) {
  SpecYieldGuard g;
  run(g, 4, 3, [](std::int32_t k) { return 1.0 + 0.3 * k; }, 40);  // 2-3 rows best, 1 row tried and measured
  const double spec = g.spec_rate(4);
  const std::int32_t steady = g.steady_rows(4);
  ASSERT_EQ(steady, 3);
  for (int i = 0; i < 5; ++i) {
    ASSERT_EQ(g.max_draft_rows(4), 3);
    g.declined_under_cap(4);  // the acceptance fell this tick: a plan of no rows, not the arm's yield
  }
  EXPECT_EQ(g.steady_rows(4), steady);
  EXPECT_DOUBLE_EQ(g.spec_rate(4), spec);
}

}  // namespace
}  // namespace uma
