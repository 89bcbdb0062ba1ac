#include "sched/tick_cost.h"

#include <gtest/gtest.h>

#include <random>

namespace uma {
namespace {

// A 1B-ish model: 1.2 GB of weights, 1.2e9 params, 16 layers of 2048, 32 KiB of KV per cell.
ModelShape shape() { return {1.2e9, 1.2e9, 16, 2048, 32768}; }

// A machine: 2 ms fixed, 20 GB/s, 200 GFLOP/s in prompt tokens' weight products and 50 in decode
// rows', 40 in attention.
double machine_ms(const TickCost& m, const TickWork& w) {
  const double row_share = w.tokens > 0 ? w.decode_rows / w.tokens : 0.0;
  return 2.0 + m.bytes(w) / 20e6 + m.dense_flops(w) * (1 - row_share) / 200e6 + m.dense_flops(w) * row_share / 50e6 +
         m.attention_flops(w) / 40e6;
}

TEST(TickCost, ColdPredictsNothing) {
  TickCost m(shape());
  EXPECT_FALSE(m.warm());
  EXPECT_EQ(m.predict_ms({16, 16 * 500}), 0.0);
  EXPECT_EQ(m.median_error(), 0.0);
}

TEST(TickCost, LearnsAMachineFromDecodeAndPromptTicksAndPredictsWithinOnePercent) {
  TickCost m(shape());
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> rows(1, 64), chunk(0, 512), depth(0, 4000);
  for (int i = 0; i < 200; ++i) {
    const double d = rows(rng), p = i % 3 == 0 ? chunk(rng) : 0, at = depth(rng);
    const TickWork w{d + p, d * at + p * at + p * (p + 1) / 2, d};
    m.observe(w, machine_ms(m, w));
  }
  ASSERT_TRUE(m.warm());
  for (const TickWork w : {TickWork{1, 100, 1}, TickWork{64, 64 * 3000, 64}, TickWork{300, 300 * 150 + 45000, 16}}) {
    EXPECT_NEAR(m.predict_ms(w), machine_ms(m, w), 0.01 * machine_ms(m, w));
  }
  EXPECT_LT(m.median_error(), 0.01);
}

TEST(TickCost, FollowsAMachineThatSlowsDown) {
  TickCost m(shape());
  const TickWork decode{16, 16 * 200, 16}, prompt{144, 16 * 200 + 128 * 64, 16};
  for (int i = 0; i < 40; ++i) m.observe(i % 2 ? decode : prompt, machine_ms(m, i % 2 ? decode : prompt));
  const double before = m.predict_ms(decode);
  for (int i = 0; i < 150; ++i) m.observe(i % 2 ? decode : prompt, 2 * machine_ms(m, i % 2 ? decode : prompt));
  EXPECT_NEAR(m.predict_ms(decode), 2 * before, 0.05 * 2 * before);
}

TEST(TickCost, AFirstGuessIsForgottenOnceServingTicksAreMeasuredAndOneOutlierMovesItByABoundedStep) {
  TickCost m(shape());
  const TickWork decode{16, 16 * 200, 16}, prompt{144, 16 * 200 + 128 * 64, 16};
  for (int i = 0; i < 20; ++i) m.observe(i % 2 ? decode : prompt, 20 * machine_ms(m, i % 2 ? decode : prompt), true);  // calibrated beside a burst
  ASSERT_TRUE(m.warm());
  EXPECT_GT(m.predict_ms(decode), 10 * machine_ms(m, decode));
  for (int i = 0; i < 20; ++i) m.observe(i % 2 ? decode : prompt, machine_ms(m, i % 2 ? decode : prompt));
  EXPECT_NEAR(m.predict_ms(decode), machine_ms(m, decode), 0.05 * machine_ms(m, decode));
  const double before = m.predict_ms(decode);
  m.observe(decode, 100 * machine_ms(m, decode));  // one tick behind a neighbour's burst
  EXPECT_LT(m.predict_ms(decode), 1.5 * before);
}

TEST(TickCost, CoefficientsStayNonNegativeOnNoisyTicks) {
  TickCost m(shape());
  std::mt19937 rng(5);
  std::normal_distribution<double> noise(1.0, 0.2);
  for (int i = 0; i < 100; ++i) {
    const TickWork w{double(1 + i % 8), double(100 * (1 + i % 8))};
    m.observe(w, machine_ms(m, w) * noise(rng));
  }
  for (double c : m.coefficients()) EXPECT_GE(c, 0.0);
  EXPECT_GT(m.predict_ms({4, 400}), 0.0);
}

TEST(TickCost, WithoutAShapeItCountsTokens) {
  TickCost m(ModelShape{});
  for (int i = 1; i <= 20; ++i) m.observe({double(i), 0}, 5.0 + 0.5 * i);
  EXPECT_NEAR(m.predict_ms({10, 0}), 10.0, 0.1);
}

}  // namespace
}  // namespace uma
