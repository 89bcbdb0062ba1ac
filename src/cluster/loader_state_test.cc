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
  LoaderState s = loader("a:1", {{"m", "nvme"}, {"n", "loaded"}});
  s.ts_ms = 1700000000123;
  s.budget_bytes = 1ull << 40;
  s.held_bytes = 5;
  s.idle_bytes = 3;
  s.queue_bytes = 7;
  LoaderState back;
  ASSERT_TRUE(decode_loader_state(encode_loader_state(s), &back).ok());
  EXPECT_EQ(encode_loader_state(back), encode_loader_state(s));
  EXPECT_EQ(back.model("n")->state, "loaded");
  for (const char* bad : {"[]", "{}", R"({"id":"a","address":"x","models":{}})", R"({"id":1,"address":"x","models":[]})",
                          R"({"id":"a","address":"x","models":[{"name":"m"}]})", R"({"id":"a","address":"x","models":[],"held_bytes":-1})",
                          R"({"id":"a","address":"x","models":[],"queue_bytes":"9"})", "not json"}) {
    EXPECT_FALSE(decode_loader_state(bad, &back).ok()) << bad;
  }
}

TEST(LoaderState, TheFastestTierThatHoldsTheModelWinsBehindEachStoresQueue) {
  const std::uint64_t gb = 1'000'000'000;
  std::vector<LoaderState> ls = {loader("remote-only"), loader("nvme", {{"m", "nvme"}}), loader("dram", {{"m", "dram"}})};
  EXPECT_DOUBLE_EQ(predicted_load_s(ls[0], "m", 4 * gb, {}), 20.25);
  EXPECT_DOUBLE_EQ(predicted_load_s(ls[1], "m", 4 * gb, {}), 2.25);
  EXPECT_DOUBLE_EQ(predicted_load_s(ls[2], "m", 4 * gb, {}), 0.75);
  EXPECT_EQ(choose_loader(ls, "m", 4 * gb), 2);
  ls[2].queue_bytes = 4 * gb;  // its disk is busy for 2 s more
  EXPECT_EQ(choose_loader(ls, "m", 4 * gb), 1);
  // Loading already somewhere: there, at no cost.
  ls[0].models = {{"m", "filling"}};
  EXPECT_EQ(choose_loader(ls, "m", 4 * gb), 0);
}

TEST(LoaderState, UnmeasuredRatesUseThePriorsAndABudgetHeldByModelsInUseExcludesALoader) {
  LoaderState fresh = loader("fresh", {{"m", "nvme"}});
  fresh.nvme_bytes_s = 0;
  fresh.start_s = 0;
  EXPECT_DOUBLE_EQ(predicted_load_s(fresh, "m", 3'000'000'000, {4e9, 1.5e9, 1e8, 0.4}), 2.4);
  LoaderState full = loader("full", {{"m", "dram"}});
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
  LoaderState light = loader("light", {{"m", "dram"}});
  LoaderState heavy = loader("heavy", {{"m", "dram"}});
  heavy.held_bytes = 100;
  EXPECT_EQ(choose_loader({heavy, light}, "m", 1), 1) << "ties go to the least held";
}

}  // namespace
}  // namespace uma::cluster
