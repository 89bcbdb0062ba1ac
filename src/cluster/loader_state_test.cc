#include "cluster/loader_state.h"

#include <gtest/gtest.h>

namespace uma::cluster {
namespace {

LoaderState loader(std::string id, std::vector<LoaderModel> models = {}) {
  LoaderState l;
  l.id = std::move(id);
  l.address = "http://" + l.id;
  l.models = std::move(models);
  l.dram_bytes_s = 8e9;
  l.nvme_bytes_s = 2e9;
  l.remote_bytes_s = 2e8;
  l.start_s = 0.25;
  return l;
}

TEST(LoaderState, RoundTripsAndRefusesWrongTypes) {
  LoaderState s = loader("a:1", {{"m", ModelState::kNvme}, {"n", ModelState::kLoaded, 123, true}});
  s.ts_ms = 1700000000123;
  s.budget_bytes = 1ull << 40;
  s.held_bytes = 5;
  s.idle_bytes = 3;
  s.queue_bytes = 7;
  LoaderState back;
  ASSERT_TRUE(decode_loader_state(encode_loader_state(s), &back).ok());
  EXPECT_EQ(encode_loader_state(back), encode_loader_state(s));
  EXPECT_EQ(back.model("n")->state, ModelState::kLoaded);
  EXPECT_EQ(back.model("n")->bytes, 123u);
  EXPECT_TRUE(back.model("n")->in_use);
  for (const char* bad : {"[]", "{}", R"({"id":"a","address":"x","models":{}})", R"({"id":1,"address":"x","models":[]})",
                          R"({"id":"a","address":"x","models":[{"name":"m"}]})", R"({"id":"a","address":"x","models":[],"held_bytes":-1})",
                          R"({"id":"a","address":"x","models":[],"queue_bytes":"9"})",
                          R"({"id":"a","address":"x","models":[{"name":"m","state":"loaded","in_use":1}]})", "not json"}) {
    EXPECT_FALSE(decode_loader_state(bad, &back).ok()) << bad;
  }
}

TEST(LoaderState, TheFastestTierThatHoldsTheModelWinsBehindEachStoresQueue) {
  const std::uint64_t gb = 1'000'000'000;
  std::vector<LoaderState> ls = {loader("remote-only"), loader("nvme", {{"m", ModelState::kNvme}}), loader("dram", {{"m", ModelState::kDram}})};
  EXPECT_DOUBLE_EQ(predicted_load_s(ls[0], "m", 4 * gb, {}), 20.25);
  EXPECT_DOUBLE_EQ(predicted_load_s(ls[1], "m", 4 * gb, {}), 2.25);
  EXPECT_DOUBLE_EQ(predicted_load_s(ls[2], "m", 4 * gb, {}), 0.75);
  EXPECT_EQ(choose_loader(ls, "m", 4 * gb), 2);
  ls[2].queue_bytes = 4 * gb;  // its disk is busy for 2 s more
  EXPECT_EQ(choose_loader(ls, "m", 4 * gb), 1);
  LoadTerms t;  // the parts the gateway logs sum to the prediction
  const double dram = predicted_load_s(ls[2], "m", 4 * gb, {}, &t);
  EXPECT_GT(t.fill_s, 0.0);
  EXPECT_GT(t.queue_s, 0.0);
  EXPECT_DOUBLE_EQ(t.fill_s + t.queue_s + t.start_s + t.stop_s, dram);
  // Loading already somewhere: there, at no cost.
  ls[0].models = {{"m", ModelState::kFilling}};
  EXPECT_EQ(choose_loader(ls, "m", 4 * gb), 0);
}

TEST(LoaderState, UnmeasuredRatesUseThePriorsAndABudgetHeldByModelsInUseExcludesALoader) {
  LoaderState fresh = loader("fresh", {{"m", ModelState::kNvme}});
  fresh.nvme_bytes_s = 0;
  fresh.start_s = 0;
  EXPECT_DOUBLE_EQ(predicted_load_s(fresh, "m", 3'000'000'000, {4e9, 1.5e9, 1e8, 0.4}), 2.4);
  LoaderState full = loader("full", {{"m", ModelState::kDram}});
  full.budget_bytes = 10;
  full.held_bytes = 8;
  full.idle_bytes = 0;
  EXPECT_LT(predicted_load_s(full, "m", 3, {}), 0);
  full.idle_bytes = 1;  // room it can make by unloading an idle model, first
  full.start_s = 0.25;
  full.stop_s = 0.125;
  EXPECT_DOUBLE_EQ(predicted_load_s(full, "m", 3, {}), 3 / 8e9 + 0.25 + 0.125);
  full.held_bytes = 7;  // room without an unload
  EXPECT_DOUBLE_EQ(predicted_load_s(full, "m", 3, {}), 3 / 8e9 + 0.25);
  full.held_bytes = 8;
  EXPECT_EQ(choose_loader({}, "m", 1), -1);
  full.idle_bytes = 0;
  EXPECT_EQ(choose_loader({full}, "m", 3), -1);
  LoaderState light = loader("light", {{"m", ModelState::kDram}});
  LoaderState heavy = loader("heavy", {{"m", ModelState::kDram}});
  heavy.held_bytes = 100;
  EXPECT_EQ(choose_loader({heavy, light}, "m", 1), 1) << "ties go to the least held";
}

// Two loaders of 3 units each, every unit held by models in use: room for a cold model of 2 units
// is made where moving the fewest bytes of models served elsewhere too frees it.
TEST(LoaderState, LiveMigrationMovesTheFewestBytesOfModelsServedElsewhere) {
  LoaderState a = loader("a", {{"big", ModelState::kLoaded, 3, true}, {"cold", ModelState::kNvme}});
  LoaderState b = loader("b", {{"s1", ModelState::kLoaded, 1, true}, {"s2", ModelState::kLoaded, 1, true}, {"solo", ModelState::kLoaded, 1, true}});
  for (LoaderState* l : {&a, &b}) {
    l->budget_bytes = 3;
    l->held_bytes = 3;
    l->idle_bytes = 0;
  }
  const std::vector<LoaderState> ls = {a, b};
  ASSERT_EQ(choose_loader(ls, "cold", 2), -1) << "no room anywhere";
  const auto everywhere = [](const std::string&, const std::string&) { return true; };
  Migration m = choose_migration(ls, "cold", 2, everywhere);
  EXPECT_EQ(m.loader, 1) << "two units moved on b against three on a";
  EXPECT_EQ(m.models.size(), 2u);
  // `solo` is served nowhere else: b can free only one unit; a's model moves.
  const auto not_solo = [](const std::string& model, const std::string&) { return model != "solo"; };
  m = choose_migration(ls, "cold", 3, not_solo);
  EXPECT_EQ(m.loader, 0);
  EXPECT_EQ(m.models, (std::vector<std::string>{"big"}));
  const auto nowhere = [](const std::string&, const std::string&) { return false; };
  EXPECT_EQ(choose_migration(ls, "cold", 2, nowhere).loader, -1) << "streams that cannot resume elsewhere stay";
  EXPECT_EQ(choose_migration(ls, "cold", 4, everywhere).loader, -1) << "larger than any budget";
  // Room from idle models needs no migration: choose_loader finds it.
  LoaderState idle = a;
  idle.models[0].in_use = false;
  idle.idle_bytes = 3;
  EXPECT_EQ(choose_loader({idle}, "cold", 2), 0);
  EXPECT_EQ(choose_migration({idle}, "cold", 2, everywhere).loader, -1);
}

// The choice was made on a view a beat behind a stream: the load waits queued at a loader whose
// budget a model in use holds. Its streams move (once the view shows it queued there), unless
// the room is coming anyway or they cannot resume elsewhere.
TEST(LoaderState, AQueuedLoadWaitingForAModelInUseMovesItsStreams) {
  LoaderState l = loader("c", {{"busy", ModelState::kLoaded, 3, true}, {"cold", ModelState::kQueued}});
  l.budget_bytes = 4;
  l.held_bytes = 3;
  l.idle_bytes = 0;
  const auto everywhere = [](const std::string&, const std::string&) { return true; };
  EXPECT_EQ(migration_for_queued_load(l, "cold", 3, everywhere), (std::vector<std::string>{"busy"}));
  const auto nowhere = [](const std::string&, const std::string&) { return false; };
  EXPECT_TRUE(migration_for_queued_load(l, "cold", 3, nowhere).empty()) << "streams that cannot resume elsewhere stay";
  EXPECT_TRUE(migration_for_queued_load(l, "cold", 1, everywhere).empty()) << "room enough: it goes in";
  LoaderState idle = l;
  idle.models[0].in_use = false;
  idle.idle_bytes = 3;
  EXPECT_TRUE(migration_for_queued_load(idle, "cold", 3, everywhere).empty()) << "an idle model leaves on its own";
  for (ModelState state : {ModelState::kFilling, ModelState::kStarting, ModelState::kLoaded, ModelState::kNvme}) {
    LoaderState s = l;
    s.models[1].state = state;
    EXPECT_TRUE(migration_for_queued_load(s, "cold", 3, everywhere).empty()) << model_state_name(state) << ": not waiting for room";
  }
  LoaderState lagging = l;
  lagging.models.pop_back();
  EXPECT_TRUE(migration_for_queued_load(lagging, "cold", 3, everywhere).empty()) << "the view does not show it queued yet";
}

}  // namespace
}  // namespace uma::cluster
