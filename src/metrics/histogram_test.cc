#include "metrics/histogram.h"

#include <gtest/gtest.h>

#include <thread>

namespace uma {
namespace {

TEST(Histogram, ValuesLandInTheFirstBucketWhoseBoundIsAtLeastThem) {
  Histogram h({10, 1, 5});  // unsorted on purpose
  for (double v : {0.5, 1.0, 1.5, 5.0, 7.0, 10.0, 11.0, 1000.0}) h.observe(v);
  const auto s = h.snapshot();
  EXPECT_EQ(s.bounds, (std::vector<double>{1, 5, 10}));
  // <=1: {0.5, 1}; <=5: +{1.5, 5}; <=10: +{7, 10}; +Inf: +{11, 1000}
  EXPECT_EQ(s.cumulative, (std::vector<std::uint64_t>{2, 4, 6, 8}));
  EXPECT_EQ(s.count, 8u);
  EXPECT_DOUBLE_EQ(s.sum, 0.5 + 1 + 1.5 + 5 + 7 + 10 + 11 + 1000);
}

TEST(Histogram, QuantilesInterpolateWithinABucket) {
  Histogram h({10, 20, 30});
  for (int i = 0; i < 10; ++i) h.observe(15);  // all in (10, 20]
  const auto s = h.snapshot();
  EXPECT_DOUBLE_EQ(Histogram::quantile(s, 0.5), 15.0);
  EXPECT_DOUBLE_EQ(Histogram::quantile(s, 1.0), 20.0);
  EXPECT_DOUBLE_EQ(Histogram::quantile(Histogram({1}).snapshot(), 0.5), 0.0);
}

TEST(Histogram, ConcurrentObserversLoseNothing) {
  Histogram h(latency_ms_bounds());
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) h.observe(i % 100);
    });
  }
  for (auto& t : threads) t.join();
  const auto s = h.snapshot();
  EXPECT_EQ(s.count, 40000u);
  EXPECT_EQ(s.cumulative.back(), 40000u);
  EXPECT_DOUBLE_EQ(s.sum, 4 * 100 * (99 * 100 / 2.0));
}

}  // namespace
}  // namespace uma
