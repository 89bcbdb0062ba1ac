#include "sched/policy.h"
#include "sched/tick_budget.h"

#include <gtest/gtest.h>

namespace uma {
namespace {

Candidate decoding(bool overdue = false) { return {true, 0, overdue}; }
Candidate prefilling(std::int32_t remaining) { return {false, remaining, false}; }

TEST(Policy, EveryDecodingSessionGetsOneTokenThenPrefillFillsTheBudget) {
  const std::vector<Candidate> c = {prefilling(100), decoding(), decoding(), prefilling(5)};
  const TickPlan p = plan_tick(c, {/*budget=*/38, /*capacity=*/512, /*min_prefill=*/8, false});
  EXPECT_EQ(p.decode, (std::vector<std::size_t>{1, 2}));
  ASSERT_EQ(p.prefill.size(), 1u);  // all 38 to the first in round-robin order
  EXPECT_EQ(p.prefill[0], (std::pair<std::size_t, std::int32_t>{0, 38}));
  EXPECT_FALSE(p.guard_fired);
}

TEST(Policy, WithNobodyDecodingPrefillUsesTheWholeCapacity) {
  const std::vector<Candidate> c = {prefilling(300), prefilling(300)};
  const TickPlan p = plan_tick(c, {/*budget=*/32, /*capacity=*/512, 8, false});
  ASSERT_EQ(p.prefill.size(), 2u);
  EXPECT_EQ(p.prefill[0].second, 300);
  EXPECT_EQ(p.prefill[1].second, 212);
}

TEST(Policy, ShortPromptsShareTheBudgetInOrder) {
  const std::vector<Candidate> c = {prefilling(10), prefilling(10), prefilling(100), decoding()};
  const TickPlan p = plan_tick(c, {32, 512, 8, false});
  ASSERT_EQ(p.prefill.size(), 3u);
  EXPECT_EQ(p.prefill[0].second, 10);
  EXPECT_EQ(p.prefill[1].second, 10);
  EXPECT_EQ(p.prefill[2].second, 12);
}

TEST(Policy, GuardSkipsPrefillButNeverTwiceRunning) {
  const std::vector<Candidate> c = {decoding(/*overdue=*/true), prefilling(100)};
  const TickPlan first = plan_tick(c, {64, 512, 8, /*guard_fired_last_tick=*/false});
  EXPECT_TRUE(first.guard_fired);
  EXPECT_EQ(first.decode.size(), 1u);
  EXPECT_TRUE(first.prefill.empty());
  const TickPlan second = plan_tick(c, {64, 512, 8, /*guard_fired_last_tick=*/true});
  EXPECT_FALSE(second.guard_fired);
  ASSERT_EQ(second.prefill.size(), 1u);
  EXPECT_EQ(second.prefill[0].second, 64);
}

TEST(Policy, PrefillGetsItsMinimumWhenDecodeUsesTheBudget) {
  std::vector<Candidate> c(20, decoding());
  c.push_back(prefilling(1000));
  const TickPlan p = plan_tick(c, {/*budget=*/0, 512, /*min_prefill=*/8, false});
  EXPECT_EQ(p.decode.size(), 20u);
  ASSERT_EQ(p.prefill.size(), 1u);
  EXPECT_EQ(p.prefill[0].second, 8);
}

TEST(Policy, CapacityIsAHardLimit) {
  std::vector<Candidate> c(10, decoding());
  c.push_back(prefilling(1000));
  const TickPlan p = plan_tick(c, {/*budget=*/64, /*capacity=*/8, 4, false});
  EXPECT_EQ(p.decode.size(), 8u);
  EXPECT_TRUE(p.prefill.empty());
}

TEST(TickBudget, KeepsTheTickNearTwiceTheDecodeOnlyTick) {
  TickBudget b(/*n_batch=*/512, /*target_ms=*/30, /*start=*/64);
  EXPECT_EQ(b.prefill_budget(), 64) << "conservative until measured";
  for (int i = 0; i < 50; ++i) {
    b.observe(100.0, /*n_decode=*/16, /*n_prefill=*/0);      // decode-only ticks: 100 ms
    b.observe(100.0 + 2.0 * 40, /*n_decode=*/16, 40);        // prefill costs 2 ms per token
  }
  EXPECT_NEAR(b.base_ms(), 100.0, 1e-6);
  EXPECT_NEAR(b.ms_per_prefill_token(), 2.0, 1e-6);
  EXPECT_EQ(b.prefill_budget(), 50);  // (2 * 100 - 100) / 2
}

TEST(TickBudget, FastDecodeUsesTheTickTargetAndClampsToTheBatch) {
  TickBudget b(/*n_batch=*/256, /*target_ms=*/30, /*start=*/64);
  for (int i = 0; i < 50; ++i) {
    b.observe(5.0, 1, 0);
    b.observe(5.0 + 0.01 * 100, 1, 100);  // 0.01 ms per prefill token
  }
  EXPECT_EQ(b.prefill_budget(), 256) << "(30 - 5) / 0.01 is beyond n_batch";
  TickBudget slow(512, 30, 64);
  for (int i = 0; i < 50; ++i) {
    slow.observe(10.0, 1, 0);
    slow.observe(10.0 + 5.0 * 16, 1, 16);  // 5 ms per prefill token
  }
  EXPECT_EQ(slow.prefill_budget(), 16) << "(30 - 10) / 5 = 4, raised to the floor";
}

}  // namespace
}  // namespace uma
