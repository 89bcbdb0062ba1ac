#include "sched/seq_id_pool.h"

#include <gtest/gtest.h>

namespace uma {
namespace {

TEST(SeqIdPool, HandsOutTheLowestFreeIdAndTakesIdsBackInAnyOrder) {
  SeqIdPool pool;
  pool.add_range(0, 4);
  EXPECT_EQ(pool.take(), 0);
  EXPECT_EQ(pool.take(), 1);
  EXPECT_EQ(pool.take(), 2);
  pool.give_back(1);
  EXPECT_EQ(pool.lowest(), 1);  // a gap is filled first: live ids stay dense
  EXPECT_EQ(pool.take(), 1);
  EXPECT_EQ(pool.take(), 3);
  EXPECT_TRUE(pool.empty());
  pool.give_back(3);
  pool.give_back(0);
  EXPECT_EQ(pool.size(), 2u);
  EXPECT_EQ(pool.take(), 0);
}

TEST(SeqIdPool, TakesTheHighestFreeIdWhenAskedAndKeepsTheLowestForTake) {
  SeqIdPool pool;
  pool.add_range(0, 5);
  EXPECT_EQ(pool.take(), 0);
  EXPECT_EQ(pool.highest(), 4);
  EXPECT_EQ(pool.take_highest(), 4);
  EXPECT_EQ(pool.take_highest(), 3);
  pool.give_back(4);
  EXPECT_EQ(pool.highest(), 4);
  EXPECT_EQ(pool.take(), 1);
  EXPECT_EQ(pool.take(), 2);
  EXPECT_EQ(pool.take(), 4);
  EXPECT_TRUE(pool.empty());
}

TEST(SeqIdPool, OwnsOnlyItsRange) {
  SeqIdPool cache;
  cache.add_range(6, 8);
  EXPECT_FALSE(cache.owns(0));
  EXPECT_TRUE(cache.owns(7));
  EXPECT_FALSE(cache.owns(8));
  EXPECT_EQ(cache.take(), 6);
}

TEST(SeqIdPoolDeathTest, GivingBackAFreeIdOrAnotherPoolsIdOrTakingFromNothingAborts) {
  SeqIdPool pool;
  pool.add_range(0, 2);
  EXPECT_DEATH(pool.give_back(1), "holds free already");
  EXPECT_DEATH(pool.give_back(5), "does not own");
  pool.take();
  pool.take();
  EXPECT_DEATH(pool.take(), "empty pool");
}

}  // namespace
}  // namespace uma
