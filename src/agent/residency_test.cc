#include "agent/residency.h"

#include <gtest/gtest.h>

namespace uma::agent {
namespace {

Resident idle(std::string id, std::uint64_t bytes, std::int64_t last_used, std::int64_t keep_alive = -1) {
  return {std::move(id), bytes, true, last_used, keep_alive};
}
Resident busy(std::string id, std::uint64_t bytes, std::int64_t last_used) { return {std::move(id), bytes, false, last_used, 0}; }

TEST(Residency, KeepAliveUnloadsOnlyIdleModelsWhoseTimeRanOut) {
  const std::vector<Resident> r = {idle("a", 10, 1000, 500), idle("b", 10, 1000, 5000), idle("forever", 10, 0, -1),
                                   busy("in-use", 10, 0), idle("zero", 10, 1400, 0)};
  EXPECT_EQ(expired(r, 1499), (std::vector<std::string>{"zero"}));
  EXPECT_EQ(expired(r, 1500), (std::vector<std::string>{"a", "zero"}));
  EXPECT_EQ(expired(r, 6000), (std::vector<std::string>{"a", "b", "zero"}));
  EXPECT_TRUE(expired({}, 1 << 30).empty());
}

TEST(Residency, ALoadThatFitsUnloadsNothing) {
  const Room room = make_room({idle("a", 40, 1), busy("b", 40, 2)}, 20, {100, 0});
  EXPECT_TRUE(room.fits);
  EXPECT_TRUE(room.unload.empty());
  EXPECT_TRUE(make_room({}, 100, {100, 0}).fits) << "exactly the budget";
  EXPECT_TRUE(make_room({idle("a", 1 << 30, 1)}, 1ull << 40, {0, 0}).fits) << "no limits";
}

TEST(Residency, RoomComesFromTheLeastRecentlyUsedIdleModelsOnlyAsManyAsNeeded) {
  const std::vector<Resident> r = {idle("new", 30, 300), idle("old", 30, 100), idle("mid", 30, 200)};
  Room room = make_room(r, 20, {100, 0});  // held 90 + 20 > 100: one of 30 is enough
  EXPECT_TRUE(room.fits);
  EXPECT_EQ(room.unload, (std::vector<std::string>{"old"}));
  room = make_room(r, 50, {100, 0});  // 90 + 50: two
  EXPECT_EQ(room.unload, (std::vector<std::string>{"old", "mid"}));
}

TEST(Residency, AModelInUseIsNeverTakenEvenWhenItIsTheOldest) {
  const std::vector<Resident> r = {busy("oldest-busy", 50, 1), idle("b", 25, 5), idle("c", 25, 9)};
  Room room = make_room(r, 30, {100, 0});
  EXPECT_TRUE(room.fits);
  EXPECT_EQ(room.unload, (std::vector<std::string>{"b", "c"}));
  room = make_room(r, 60, {100, 0});  // 50 in use + 60 > 100 whatever is unloaded
  EXPECT_FALSE(room.fits);
  EXPECT_TRUE(room.unload.empty()) << "nothing is unloaded for a load that cannot be admitted";
  EXPECT_EQ(room.held_in_use, 50u);
}

TEST(Residency, AModelLargerThanTheWholeBudgetNeverFits) {
  const Room room = make_room({idle("a", 10, 1)}, 101, {100, 0});
  EXPECT_FALSE(room.fits);
  EXPECT_TRUE(room.unload.empty());
}

TEST(Residency, TheModelCountIsABudgetToo) {
  const std::vector<Resident> r = {idle("a", 1, 2), idle("b", 1, 1)};
  Room room = make_room(r, 1, {0, 2});
  EXPECT_TRUE(room.fits);
  EXPECT_EQ(room.unload, (std::vector<std::string>{"b"}));
  EXPECT_FALSE(make_room({busy("a", 1, 1), busy("b", 1, 2)}, 1, {0, 2}).fits);
  EXPECT_TRUE(make_room(r, 1, {0, 3}).unload.empty());
}

}  // namespace
}  // namespace uma::agent
