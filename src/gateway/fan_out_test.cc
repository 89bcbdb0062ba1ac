// Fan-out on synthetic loaders and a virtual clock: a model becomes busy by its request rate;
// loaders that lack it are asked to prefetch it, the fastest remote fills first, until `copies`
// hold it; nobody is asked twice within `every`; a quiet model is forgotten.
#include "gateway/fan_out.h"

#include <gtest/gtest.h>

namespace uma::gateway {
namespace {

using namespace std::chrono_literals;

cluster::LoaderState loader(const std::string& id, double remote_bytes_s, std::vector<cluster::LoaderModel> models = {}) {
  cluster::LoaderState l;
  l.id = id;
  l.remote_bytes_s = remote_bytes_s;
  l.models = std::move(models);
  return l;
}

TEST(FanOut, TheRequestRateDecaysWithItsHalfLife) {
  FanOutOptions o;
  o.half_life = 10s;
  FanOut f(o);
  const auto t0 = std::chrono::steady_clock::time_point{} + 1000s;
  // Steady arrivals at 2/s: the estimate reaches 2/s.
  for (int i = 0; i < 400; ++i) f.arrived("m", t0 + i * 500ms);
  EXPECT_NEAR(f.rate("m", t0 + 199500ms), 2.0, 0.1);
  EXPECT_NEAR(f.rate("m", t0 + 209500ms), 1.0, 0.05) << "one half-life later";
  EXPECT_EQ(f.rate("other", t0), 0);
}

TEST(FanOut, ABusyModelIsPrefetchedToTheLoadersLackingItFastestFirstUntilCopiesHoldIt) {
  FanOutOptions o;
  o.copies = 3;
  o.min_rps = 1.0;
  o.half_life = 10s;
  o.every = 60s;
  FanOut f(o);
  const auto t0 = std::chrono::steady_clock::time_point{} + 1000s;
  const std::vector<cluster::LoaderState> loaders = {
      loader("a", 1e8, {{"m", cluster::ModelState::kLoaded}}), loader("b", 5e7), loader("c", 2e8), loader("d", 1e8, {{"other", cluster::ModelState::kNvme}})};
  for (int i = 0; i < 10; ++i) f.arrived("m", t0 + i * 1s);  // 1/s for 10 s: ~0.5/s estimated
  EXPECT_TRUE(f.due(loaders, t0 + 10s).empty()) << f.rate("m", t0 + 10s);
  for (int i = 0; i < 30; ++i) f.arrived("m", t0 + 10s + i * 500ms);  // then 2/s
  auto due = f.due(loaders, t0 + 25s);
  ASSERT_EQ(due.size(), 2u) << "a holds it: two more make three";
  EXPECT_EQ(due[0], (FanOut::Prefetch{"m", "c"})) << "the fastest remote fill first";
  EXPECT_EQ(due[1], (FanOut::Prefetch{"m", "d"})) << "then by rate (ties by id)";
  EXPECT_TRUE(f.due(loaders, t0 + 26s).empty()) << "asked already";
  for (int i = 0; i < 120; ++i) f.arrived("m", t0 + 26s + i * 500ms);
  // After `every`, loaders whose beats still lack it are asked again.
  EXPECT_EQ(f.due(loaders, t0 + 86s).size(), 2u);
  // Held in a tier now (their beats say so): nothing more to do.
  const std::vector<cluster::LoaderState> held = {loader("a", 1e8, {{"m", cluster::ModelState::kLoaded}}), loader("b", 5e7),
                                                 loader("c", 2e8, {{"m", cluster::ModelState::kNvme}}), loader("d", 1e8, {{"m", cluster::ModelState::kFilling}})};
  EXPECT_TRUE(f.due(held, t0 + 200s).empty());
}

TEST(FanOut, OffWithOneCopyAndQuietModelsAreForgotten) {
  FanOutOptions off;
  off.copies = 1;
  FanOut f(off);
  const auto t0 = std::chrono::steady_clock::time_point{} + 1000s;
  for (int i = 0; i < 100; ++i) f.arrived("m", t0);
  EXPECT_FALSE(f.enabled());
  EXPECT_TRUE(f.due({loader("a", 1e8), loader("b", 1e8)}, t0).empty());
  EXPECT_EQ(f.rate("m", t0), 0) << "nothing is counted when off";

  FanOutOptions on;
  on.half_life = 1s;
  FanOut g(on);
  g.arrived("m", t0);
  EXPECT_GT(g.rate("m", t0), 0);
  EXPECT_TRUE(g.due({loader("a", 1e8), loader("b", 1e8)}, t0 + 60s).empty());
  EXPECT_EQ(g.rate("m", t0 + 60s), 0) << "forgotten";
}

}  // namespace
}  // namespace uma::gateway
