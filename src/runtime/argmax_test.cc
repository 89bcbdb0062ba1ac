#include "runtime/argmax.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace uma {
namespace {

std::int32_t reference(const std::vector<float>& row) {
  std::int32_t best = 0;
  for (std::int32_t t = 1; t < static_cast<std::int32_t>(row.size()); ++t) {
    if (row[static_cast<size_t>(t)] > row[static_cast<size_t>(best)]) best = t;
  }
  return best;
}

TEST(Argmax, MatchesTheScalarLoopOnRandomRowsOfEveryLength) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  for (const std::int32_t n : {1, 2, 15, 16, 511, 512, 513, 1024, 1500, 32000, 32003}) {
    for (int trial = 0; trial < 20; ++trial) {
      std::vector<float> row(static_cast<size_t>(n));
      for (float& x : row) x = normal(rng);
      ASSERT_EQ(argmax_first(row.data(), n), reference(row)) << "n " << n << " trial " << trial;
    }
  }
}

TEST(Argmax, TiesGoToTheFirstMaximumInAnyChunk) {
  std::vector<float> row(32000, -1.0f);
  row[9000] = 5.0f;
  row[700] = 5.0f;  // an equal maximum in an earlier chunk wins
  row[701] = 5.0f;
  EXPECT_EQ(argmax_first(row.data(), 32000), 700);
  std::vector<float> flat(1300, 0.25f);  // all equal: the first
  EXPECT_EQ(argmax_first(flat.data(), 1300), 0);
  row.assign(32000, -1.0f);
  row[31999] = 3.0f;  // in the tail after the last whole chunk
  EXPECT_EQ(argmax_first(row.data(), 32000), 31999);
  row[511] = 4.0f;  // last lane of the first chunk
  EXPECT_EQ(argmax_first(row.data(), 32000), 511);
}

}  // namespace
}  // namespace uma
