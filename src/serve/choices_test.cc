// expand_choices: a request's choices as the scheduler runs them.
#include "serve/choices.h"

#include <gtest/gtest.h>

namespace uma {
namespace {

TEST(Choices, ConsecutiveIdsSeedsPerChoiceAndPromptsByIndex) {
  Request r;
  r.id = 40;
  r.prompt = "own";
  r.sampling.seed = 7;
  const std::vector<Request> one = expand_choices(r, 1, {});
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].id, 40u);
  EXPECT_EQ(one[0].sampling.seed, 7u);
  // Two prompts, n = 2 each: choices 0-1 run the first, 2-3 the second.
  const std::vector<Request> four = expand_choices(r, 4, {{"a", {}, {}}, {"", {5, 6}, {}}});
  ASSERT_EQ(four.size(), 4u);
  for (std::size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(four[i].id, 40u + i);
    EXPECT_EQ(four[i].sampling.seed, 7u + i);
  }
  EXPECT_EQ(four[1].prompt, "a");
  EXPECT_TRUE(four[1].prompt_tokens.empty());
  EXPECT_EQ(four[2].prompt, "");
  EXPECT_EQ(four[3].prompt_tokens, (std::vector<std::int32_t>{5, 6}));
  r.sampling.seed = kRandomSeed;
  for (const Request& q : expand_choices(r, 3, {})) {
    EXPECT_EQ(q.sampling.seed, kRandomSeed) << "unseeded choices stay random";
    EXPECT_EQ(q.prompt, "own");
  }
}

}  // namespace
}  // namespace uma
