#include "sched/thread_governor.h"

#include <gtest/gtest.h>

namespace uma {
namespace {

constexpr double kW = ThreadGovernor::kWindowMs;

TEST(ThreadGovernor, FitsTheCoresOthersLeaveCountingALightNeighbourAsNone) {
  ThreadGovernor g(8, 8, true);
  EXPECT_EQ(g.fit(0.0), 8);
  EXPECT_EQ(g.fit(0.25), 8);  // a core others use a quarter of is still ours
  EXPECT_EQ(g.fit(0.5), 7);
  EXPECT_EQ(g.fit(1.0), 7);
  EXPECT_EQ(g.fit(1.4), 6);
  EXPECT_EQ(g.fit(7.9), 1);
  EXPECT_EQ(g.fit(40.0), 1);  // never none
}

TEST(ThreadGovernor, UnderAQuotaOnlyWhatOthersLeaveOfTheSharedCpusCounts) {
  ThreadGovernor g(/*most=*/4, /*cpus=*/64, true);  // a container's 4 cores of quota on a 64-CPU host
  EXPECT_EQ(g.fit(40.0), 4) << "24 CPUs free: the quota is the limit";
  EXPECT_EQ(g.fit(61.0), 3);
  EXPECT_EQ(g.fit(64.0), 1);
}

TEST(ThreadGovernor, ANeighbourTakesAThreadAtOnceAndGivesItBackAfterTwoQuietWindows) {
  ThreadGovernor g(2, 2, true);
  double t = 0;
  g.observe_window(t += kW, 0.02);
  EXPECT_EQ(g.threads(), 2);
  g.observe_window(t += kW, 1.0);  // `yes` on one core
  EXPECT_EQ(g.threads(), 1);
  EXPECT_EQ(g.changes(), 1u);
  g.observe_window(t += kW, 0.05);  // it left: one quiet window is not enough
  EXPECT_EQ(g.threads(), 1);
  g.observe_window(t += kW, 1.0);  // back: the streak starts over
  g.observe_window(t += kW, 0.05);
  EXPECT_EQ(g.threads(), 1);
  g.observe_window(t += kW, 0.05);
  EXPECT_EQ(g.threads(), 2);
  EXPECT_EQ(g.changes(), 2u);
}

TEST(ThreadGovernor, AStarvedDecodeDropsAThreadWithoutWaitingForTheWindow) {
  ThreadGovernor g(4, 4, true);
  g.observe_decode(10, 20.0, 4 * 20.0 * 0.97);  // every thread on a core
  EXPECT_EQ(g.threads(), 4);
  g.observe_decode(40, 30.0, 4 * 30.0 * 0.5);  // half the pool waited for taken cores
  EXPECT_EQ(g.threads(), 3);
  g.observe_decode(45, 1.0, 0.1);  // too short to tell
  EXPECT_EQ(g.threads(), 3);
}

TEST(ThreadGovernor, OneThreadIsNeverStarvedOfItself) {
  ThreadGovernor g(1, 1, true);
  g.observe_window(kW, 3.0);
  g.observe_decode(kW + 50, 50.0, 5.0);
  EXPECT_EQ(g.threads(), 1);
  EXPECT_EQ(g.threads_for_decode(1e6), 1) << "no core to try";
}

TEST(ThreadGovernor, AFixedCountNeverMoves) {
  ThreadGovernor g(2, 2, false);
  g.observe_window(kW, 2.0);
  g.observe_decode(kW + 50, 50.0, 10.0);
  EXPECT_EQ(g.threads_for_decode(1e9), 2);
  EXPECT_EQ(g.changes(), 0u);
  EXPECT_DOUBLE_EQ(g.others_cores(), 2.0) << "the measure is still reported";
}

// A neighbour of lower priority fills our idle core but yields it: the windows keep saying "busy",
// and only a decode tried with the core tells.
TEST(ThreadGovernor, ATryWithOneMoreThreadIsKeptWhenItsDecodeWasNotStarvedAndBacksOffWhenItWas) {
  ThreadGovernor g(2, 2, true);
  double t = kW;
  g.observe_window(t, 1.0);
  ASSERT_EQ(g.threads(), 1);
  EXPECT_EQ(g.threads_for_decode(t + 1), 1) << "no try before its time";
  t += ThreadGovernor::kProbeFirstMs;
  EXPECT_EQ(g.threads_for_decode(t), 2);
  g.observe_decode(t + 10, 10.0, 2 * 10.0 * 0.4);  // starved: a neighbour of equal priority
  EXPECT_EQ(g.threads(), 1);
  EXPECT_EQ(g.threads_for_decode(t + 10 + ThreadGovernor::kProbeFirstMs), 1) << "the next try waits twice as long";
  t += 10 + 2 * ThreadGovernor::kProbeFirstMs;
  EXPECT_EQ(g.threads_for_decode(t), 2);
  g.observe_decode(t + 10, 10.0, 2 * 10.0 * 0.95);  // the neighbour yielded
  EXPECT_EQ(g.threads(), 2);
  // The window that began before the pool grew still shows the neighbour: it is not followed.
  g.observe_window(t + 100, 1.0);
  EXPECT_EQ(g.threads(), 2);
  g.observe_window(t + 100 + kW, 0.05);  // with our pool on both cores the neighbour gets little
  EXPECT_EQ(g.threads(), 2);
  EXPECT_EQ(g.threads_for_decode(t + 1e6), 2) << "nothing to try at the most";
}

TEST(ThreadGovernor, ATooShortTriedDecodeLeavesTheTryDue) {
  ThreadGovernor g(2, 2, true);
  g.observe_window(kW, 1.0);
  const double t = kW + ThreadGovernor::kProbeFirstMs;
  EXPECT_EQ(g.threads_for_decode(t), 2);
  g.observe_decode(t + 1, 0.5, 0.1);
  EXPECT_EQ(g.threads(), 1);
  EXPECT_EQ(g.threads_for_decode(t + 2), 2);
}

}  // namespace
}  // namespace uma
