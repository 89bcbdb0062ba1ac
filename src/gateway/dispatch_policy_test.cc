// The gateway's dispatch decisions on synthetic facts and a virtual clock: where a request goes
// for each state of its model and of the agents, the waiting lists (first come first served, the
// shared bound, deadlines, models that become served), and one model's load attempts (one lock
// try at a time, backing off after a busy lock or a failure, a lock ttl after a success).
#include "gateway/dispatch_policy.h"

#include <gtest/gtest.h>

#include <map>

namespace uma::gateway {
namespace {

using namespace std::chrono_literals;
using Step = DispatchStep;

DispatchFacts facts(ModelLookup m, bool loads, std::size_t waiting = 0, std::size_t max = 4) {
  DispatchFacts f;
  f.model = m;
  f.loads_on_demand = loads;
  f.waiting = waiting;
  f.max_waiting = max;
  return f;
}

DispatchFacts routed(DispatchFacts f, bool chose, int full, bool woken = false) {
  f.routed = true;
  f.chose = chose;
  f.full = full;
  f.woken = woken;
  return f;
}

TEST(DecideDispatch, AModelOnlyInTheCatalogWaitsForItsLoadWhenTheGatewayCanLoadAndThereIsRoomToWait) {
  EXPECT_EQ(decide_dispatch(facts(ModelLookup::kCatalogOnly, true)), Step::kAwaitModel);
  EXPECT_EQ(decide_dispatch(facts(ModelLookup::kCatalogOnly, true, 4, 4)), Step::kOverloaded);
  // No loader: routing finds nobody and says so.
  EXPECT_EQ(decide_dispatch(facts(ModelLookup::kCatalogOnly, false)), Step::kRoute);
  EXPECT_EQ(decide_dispatch(routed(facts(ModelLookup::kCatalogOnly, false), false, 0)), Step::kUnavailable);
  for (ModelLookup m : {ModelLookup::kServed, ModelLookup::kUnknown}) {
    EXPECT_EQ(decide_dispatch(facts(m, true)), Step::kRoute) << static_cast<int>(m);
  }
}

TEST(DecideDispatch, RoutingsOutcomeSendsQueuesOrRefuses) {
  const DispatchFacts f = facts(ModelLookup::kServed, false, 1, 2);
  EXPECT_EQ(decide_dispatch(routed(f, true, 3)), Step::kSend);
  EXPECT_EQ(decide_dispatch(routed(f, false, 0)), Step::kUnavailable) << "nobody full, nobody chosen: nobody can";
  EXPECT_EQ(decide_dispatch(routed(f, false, 2)), Step::kQueue);
  EXPECT_EQ(decide_dispatch(routed(facts(ModelLookup::kServed, false, 2, 2), false, 2)), Step::kOverloaded);
  // Woken and still no room: back to its place, even with the waiting room full (it is counted there already).
  EXPECT_EQ(decide_dispatch(routed(facts(ModelLookup::kServed, false, 2, 2), false, 2, true)), Step::kQueueAgain);
  EXPECT_EQ(decide_dispatch(routed(facts(ModelLookup::kServed, false, 2, 2), true, 2, true)), Step::kSend);
}

TEST(WaitLists, RoomIsServedFirstComeFirstServedAndAWokenRequestWithoutRoomKeepsItsPlace) {
  const auto t0 = DispatchClock::time_point{} + 100s;
  WaitLists<int> w(3);
  w.wait_for_room(1, t0, false);
  w.wait_for_room(2, t0 + 1s, false);
  w.wait_for_model(3, "m", t0 + 2s);
  EXPECT_TRUE(w.full()) << "one bound for both lists";
  EXPECT_EQ(w.waiting_for_room(), 2u);
  EXPECT_EQ(w.next_for_room(), 1);
  w.wait_for_room(1, t0, true);  // no room after all
  EXPECT_EQ(w.front_for_room(), 1);
  EXPECT_EQ(w.next_for_room(), 1);
  EXPECT_EQ(w.next_for_room(), 2);
  EXPECT_EQ(w.next_for_room(), std::nullopt);
  EXPECT_EQ(w.leave(3, t0 + 5s), 3s) << "how long it waited";
  EXPECT_EQ(w.leave(3, t0 + 5s), std::nullopt);
  EXPECT_EQ(w.size(), 0u);
}

TEST(WaitLists, DeadlinesEndRequestsByWhenTheyFirstWaited) {
  const auto t0 = DispatchClock::time_point{} + 100s;
  WaitLists<int> w(8);
  w.wait_for_room(1, t0, false);
  w.wait_for_room(2, t0 + 20s, false);
  w.wait_for_room(3, t0 - 5s, true);  // woken before, first waited earlier: its age counts
  EXPECT_EQ(w.room_expired(t0 + 29s, 30s), (std::vector<int>{3}));
  EXPECT_EQ(w.room_expired(t0 + 31s, 30s), (std::vector<int>{1}));
  EXPECT_EQ(w.waiting_for_room(), 1u);
}

TEST(WaitLists, RequestsForColdModelsGoWhenAnAgentServesTheirModelEndAtTheirDeadlineAndAskForOneLoadEach) {
  const auto t0 = DispatchClock::time_point{} + 100s;
  WaitLists<int> w(8);
  w.wait_for_model(1, "a", t0);
  w.wait_for_model(2, "a", t0 + 1s);
  w.wait_for_model(3, "b", t0 + 2s);
  w.wait_for_model(4, "c", t0 - 60s);
  std::map<std::string, ModelLookup> where = {{"a", ModelLookup::kCatalogOnly}, {"b", ModelLookup::kCatalogOnly},
                                              {"c", ModelLookup::kCatalogOnly}};
  const auto lookup = [&](const std::string& m) { return where[m]; };
  auto v = w.judge_models(lookup, t0 + 10s, 30s);
  EXPECT_TRUE(v.ready.empty());
  EXPECT_EQ(v.expired, (std::vector<int>{4}));
  EXPECT_EQ(v.still_cold, (std::vector<std::string>{"a", "b"})) << "one load asked for per model";
  where["a"] = ModelLookup::kServed;
  v = w.judge_models(lookup, t0 + 10s, 30s);
  EXPECT_EQ(v.ready, (std::vector<int>{1, 2}));
  EXPECT_EQ(v.still_cold, (std::vector<std::string>{"b"}));
  where["b"] = ModelLookup::kUnknown;  // removed from the catalog meanwhile: it goes, and routing answers
  EXPECT_EQ(w.judge_models(lookup, t0 + 10s, 30s).ready, (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(w.size(), 4u) << "judging leaves the lists to the requests' own dispatch";
}

TEST(LoadAttempt, OneLockTryAtATimeBackingOffAfterABusyLockOrAFailureAndALockTtlAfterASuccess) {
  const auto t0 = DispatchClock::time_point{} + 100s;
  LoadAttempt a;
  EXPECT_TRUE(a.want_lock(t0));
  EXPECT_FALSE(a.want_lock(t0)) << "a second request while the lock is tried";
  a.lock_result(false, t0, 500ms);  // another gateway holds it
  EXPECT_EQ(a.phase(), LoadAttempt::Phase::kBackoff);
  EXPECT_FALSE(a.want_lock(t0 + 499ms));
  EXPECT_TRUE(a.want_lock(t0 + 500ms));
  a.lock_result(true, t0 + 501ms, 500ms);
  EXPECT_EQ(a.phase(), LoadAttempt::Phase::kLoading);
  EXPECT_FALSE(a.want_lock(t0 + 60s)) << "never while ours runs";
  a.load_result(false, t0 + 61s, 500ms, 10s);
  EXPECT_TRUE(a.want_lock(t0 + 61s + 500ms)) << "a failed load is tried again soon";
  a.no_loader(t0 + 62s, 500ms);
  EXPECT_TRUE(a.want_lock(t0 + 63s));
  a.lock_result(true, t0 + 63s, 500ms);
  a.load_result(true, t0 + 70s, 500ms, 10s);
  EXPECT_FALSE(a.want_lock(t0 + 79s)) << "loaded: the new agent's beat is awaited, not a second load";
  EXPECT_TRUE(a.want_lock(t0 + 80s));
}

TEST(LoadAttemptDeathTest, AResultNobodyAskedForAborts) {
  EXPECT_DEATH(
      {
        LoadAttempt a;
        a.load_result(true, DispatchClock::time_point{}, 1s, 1s);
      },
      "illegal transition");
}

}  // namespace
}  // namespace uma::gateway
