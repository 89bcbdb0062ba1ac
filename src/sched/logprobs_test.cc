#include "sched/logprobs.h"

#include <gtest/gtest.h>

#include <cmath>

namespace uma {
namespace {

TEST(Logprobs, LogSoftmaxAtTheChosenTokenAndTheTopInOrder) {
  const std::vector<float> row = {1.0f, 3.0f, 2.0f, 3.0f, -1.0f};
  double z = 0;
  for (float x : row) z += std::exp(x);
  const LogprobEntry e = logprob_entry(row, 2, 3);
  EXPECT_EQ(e.chosen.token, 2);
  EXPECT_NEAR(e.chosen.logprob, 2.0 - std::log(z), 1e-5);
  ASSERT_EQ(e.top.size(), 3u);
  EXPECT_EQ(e.top[0].token, 1) << "equal logits: the lower id first";
  EXPECT_EQ(e.top[1].token, 3);
  EXPECT_EQ(e.top[2].token, 2);
  EXPECT_NEAR(e.top[0].logprob, 3.0 - std::log(z), 1e-5);
  double total = 0;
  for (std::int32_t t = 0; t < 5; ++t) total += std::exp(logprob_entry(row, t, 0).chosen.logprob);
  EXPECT_NEAR(total, 1.0, 1e-5) << "a distribution";
}

TEST(Logprobs, LargeLogitsDoNotOverflowAndNoRowGivesJustTheToken) {
  const std::vector<float> row = {1000.0f, 999.0f};
  const LogprobEntry e = logprob_entry(row, 0, 5);
  EXPECT_NEAR(e.chosen.logprob, -std::log(1.0 + std::exp(-1.0)), 1e-5);
  EXPECT_EQ(e.top.size(), 2u) << "top_n beyond the vocabulary: all of it";
  const LogprobEntry none = logprob_entry({}, 7, 3);
  EXPECT_EQ(none.chosen.token, 7);
  EXPECT_TRUE(none.top.empty());
}

}  // namespace
}  // namespace uma
