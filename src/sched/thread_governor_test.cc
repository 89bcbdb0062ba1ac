#include "sched/thread_governor.h"

#include <gtest/gtest.h>

namespace uma {
namespace {

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
  g.observe_window(0.02);
  EXPECT_EQ(g.threads(), 2);
  g.observe_window(1.0);  // `yes` on one core
  EXPECT_EQ(g.threads(), 1);
  EXPECT_EQ(g.changes(), 1u);
  g.observe_window(0.05);  // it left: one quiet window is not enough
  EXPECT_EQ(g.threads(), 1);
  g.observe_window(1.0);  // back: the streak starts over
  g.observe_window(0.05);
  EXPECT_EQ(g.threads(), 1);
  g.observe_window(0.05);
  EXPECT_EQ(g.threads(), 2);
  EXPECT_EQ(g.changes(), 2u);
}

TEST(ThreadGovernor, AStarvedDecodeDropsAThreadWithoutWaitingForTheWindow) {
  ThreadGovernor g(4, 4, true);
  g.observe_decode(20.0, 4 * 20.0 * 0.97);  // every thread on a core
  EXPECT_EQ(g.threads(), 4);
  g.observe_decode(30.0, 4 * 30.0 * 0.5);  // half the pool waited for taken cores
  EXPECT_EQ(g.threads(), 3);
  g.observe_decode(1.0, 0.1);  // too short to tell
  EXPECT_EQ(g.threads(), 3);
}

TEST(ThreadGovernor, OneThreadIsNeverStarvedOfItself) {
  ThreadGovernor g(1, 1, true);
  g.observe_window(3.0);
  g.observe_decode(50.0, 5.0);
  EXPECT_EQ(g.threads(), 1);
}

TEST(ThreadGovernor, AFixedCountNeverMoves) {
  ThreadGovernor g(2, 2, false);
  g.observe_window(2.0);
  g.observe_decode(50.0, 10.0);
  EXPECT_EQ(g.threads(), 2);
  EXPECT_EQ(g.changes(), 0u);
  EXPECT_DOUBLE_EQ(g.others_cores(), 2.0) << "the measure is still reported";
}

}  // namespace
}  // namespace uma
