#include "gateway/model_pull.h"

#include <gtest/gtest.h>

namespace uma::gateway {
namespace {

using json = nlohmann::json;
using Stage = PullProgress::Stage;

json row(const std::string& tier, std::uint64_t ready, bool filling, const std::string& error = "") {
  json r = {{"model", "m"}, {"state", tier}, {"tier", tier}, {"bytes", 1000}, {"ready_bytes", ready}, {"filling", filling}};
  if (!error.empty()) r["error"] = error;
  return json{{"models", json::array({{{"model", "other"}, {"tier", "nvme"}, {"bytes", 5}}, r})}};
}

TEST(ModelPull, ALoadersModelListSaysWhereThePullStands) {
  PullProgress p = read_pull_progress(row("remote", 250, true), "m");
  EXPECT_EQ(p.stage, Stage::kFilling);
  EXPECT_EQ(p.total, 1000u);
  EXPECT_EQ(p.completed, 250u);
  p = read_pull_progress(row("nvme", 0, false), "m");  // an NVMe prefetch's memory goes once it is written
  EXPECT_EQ(p.stage, Stage::kDone);
  EXPECT_EQ(p.completed, 1000u);
  EXPECT_EQ(read_pull_progress(row("dram", 1000, false), "m").stage, Stage::kDone);
  // A failed fill says why; an old error while a new fill runs is not this pull's.
  p = read_pull_progress(row("remote", 0, false, "chunk 3: hash mismatch"), "m");
  EXPECT_EQ(p.stage, Stage::kFailed);
  EXPECT_EQ(p.error, "chunk 3: hash mismatch");
  EXPECT_EQ(read_pull_progress(row("remote", 10, true, "chunk 3: hash mismatch"), "m").stage, Stage::kFilling);
  EXPECT_EQ(read_pull_progress(row("remote", 0, false), "m").stage, Stage::kFailed) << "gone again (a DRAM tier's)";
  EXPECT_EQ(read_pull_progress(row("remote", 5000, true), "m").completed, 1000u) << "never past the total";
  EXPECT_EQ(read_pull_progress(row("remote", 0, true), "absent").stage, Stage::kWaiting);
  EXPECT_EQ(read_pull_progress(json::parse("[1]"), "m").stage, Stage::kFailed);
  EXPECT_EQ(read_pull_progress(json{{"models", json::array({1, "x", nullptr})}}, "m").stage, Stage::kWaiting);
}

cluster::LoaderState loader(const std::string& id, std::vector<cluster::LoaderModel> models, std::uint64_t queue = 0) {
  cluster::LoaderState l;
  l.id = id;
  l.address = "http://127.0.0.1:1";
  l.models = std::move(models);
  l.queue_bytes = queue;
  return l;
}

TEST(ModelPull, GoesWhereTheModelIsHeldOrOnItsWayElseWhereItWouldLoadFastest) {
  bool held = true;
  EXPECT_EQ(choose_pull_loader({}, "m", &held), -1);
  std::vector<cluster::LoaderState> ls = {loader("a", {}), loader("b", {{"m", cluster::ModelState::kNvme}})};
  EXPECT_EQ(choose_pull_loader(ls, "m", &held), 1);
  EXPECT_TRUE(held);
  ls[1].models = {{"m", cluster::ModelState::kFilling}};
  EXPECT_EQ(choose_pull_loader(ls, "m", &held), 1);
  EXPECT_FALSE(held) << "on its way: the pull follows that fill";
  ls[1].models.clear();
  ls[0].queue_bytes = 8ull << 30;  // eight GiB still to move on a: b is sooner
  EXPECT_EQ(choose_pull_loader(ls, "m", &held), 1);
  EXPECT_FALSE(held);
  // No room for a load anywhere (budgets held by models in use) does not stop a pull.
  for (auto& l : ls) {
    l.budget_bytes = l.held_bytes = 1;
    l.models = {{"busy", cluster::ModelState::kLoaded, 1, true}};
  }
  EXPECT_GE(choose_pull_loader(ls, "m", &held), 0);
}

}  // namespace
}  // namespace uma::gateway
