#include "common/bucketed_ewma.h"

#include <gtest/gtest.h>

namespace uma {
namespace {

TEST(BucketedEwma, KeepsEachPowerOfTwoRangeApartAndUnmeasuredOnesAtZero) {
  EXPECT_EQ(BucketedEwma::bucket_of(0), 0u);
  EXPECT_EQ(BucketedEwma::bucket_of(1), 1u);
  EXPECT_EQ(BucketedEwma::bucket_of(3), 2u);
  EXPECT_EQ(BucketedEwma::bucket_of(16), 5u);
  EXPECT_EQ(BucketedEwma::bucket_of(std::size_t{1} << 40), BucketedEwma::kBuckets - 1);
  BucketedEwma e(0.5);
  e.add(16, 8.0);
  EXPECT_DOUBLE_EQ(e.value(20), 8.0) << "16-31 share a bucket";
  EXPECT_FALSE(e.seen(1));
  EXPECT_DOUBLE_EQ(e.value(1), 0.0) << "a lone row is not charged sixteen's cost";
  e.add(1, 2.0);
  e.add(1, 4.0);
  EXPECT_DOUBLE_EQ(e.value(1), 3.0) << "the first sample, then weighted";
  e.decay(1, 0.5);
  EXPECT_DOUBLE_EQ(e.value(1), 1.5);
  EXPECT_DOUBLE_EQ(e.value(16), 8.0);
}

}  // namespace
}  // namespace uma
