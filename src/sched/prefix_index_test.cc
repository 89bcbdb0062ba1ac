#include "sched/prefix_index.h"

#include <gtest/gtest.h>

namespace uma {
namespace {

std::vector<Token> seq(std::initializer_list<std::pair<Token, int>> runs) {
  std::vector<Token> t;
  for (auto [tok, n] : runs) t.insert(t.end(), static_cast<std::size_t>(n), tok);
  return t;
}
const auto kAny = [](PrefixIndex::EntryId) { return true; };

TEST(PrefixIndex, FindsTheLongestSharedPrefixPastTheLastWholeBlock) {
  PrefixIndex idx(/*block=*/4);
  idx.insert(1, seq({{7, 10}, {8, 5}}));
  idx.insert(2, seq({{7, 6}, {9, 9}}));
  const std::vector<Token> prompt = seq({{7, 10}, {8, 2}, {5, 3}});
  const PrefixIndex::Match m = idx.find(prompt, 100, kAny);
  EXPECT_EQ(m.id, 1u);
  EXPECT_EQ(m.length, 12) << "3 whole blocks, then 0 more whole, extended token by token to 12";
  EXPECT_EQ(idx.find(prompt, 9, kAny).length, 9) << "capped by max_length";
  EXPECT_EQ(idx.find(prompt, 100, [](auto id) { return id == 2; }).length, 6) << "only usable entries";
  EXPECT_EQ(idx.find(seq({{7, 3}}), 100, kAny).length, 0) << "less than one block is no match";
}

TEST(PrefixIndex, EraseRemovesAnEntryAndPreferBreaksTies) {
  PrefixIndex idx(4);
  idx.insert(1, seq({{7, 8}}));
  idx.insert(2, seq({{7, 8}}));
  EXPECT_EQ(idx.find(seq({{7, 9}}), 100, kAny, [](auto id) { return id == 2; }).id, 2u);
  idx.erase(2);
  EXPECT_EQ(idx.find(seq({{7, 9}}), 100, kAny).id, 1u);
  idx.erase(1);
  EXPECT_EQ(idx.find(seq({{7, 9}}), 100, kAny).length, 0);
  EXPECT_EQ(idx.size(), 0u);
}

TEST(PrefixIndex, ACollidingHashNeverServesAnotherPromptsTokens) {
  PrefixIndex idx(4, [](std::uint64_t, std::span<const Token>) -> std::uint64_t { return 42; });
  idx.insert(1, seq({{7, 12}}));
  idx.insert(2, seq({{7, 4}, {9, 8}}));
  // Every block hashes alike, so both entries are candidates at every depth; tokens decide.
  const PrefixIndex::Match m = idx.find(seq({{7, 4}, {9, 2}, {3, 6}}), 100, kAny);
  EXPECT_EQ(m.id, 2u);
  EXPECT_EQ(m.length, 6);
  EXPECT_EQ(idx.find(seq({{5, 12}}), 100, kAny).length, 0) << "no entry starts with these tokens";
  // A colliding entry shorter than the depth looked up is skipped, never read past its end.
  idx.insert(3, seq({{7, 4}}));
  EXPECT_EQ(idx.find(seq({{7, 4}, {9, 8}, {1, 8}}), 100, kAny).length, 12);
}

}  // namespace
}  // namespace uma
