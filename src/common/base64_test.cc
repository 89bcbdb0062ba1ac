#include "common/base64.h"

#include <gtest/gtest.h>

namespace uma {
namespace {

TEST(Base64, RoundTripsEveryLengthAndByte) {
  std::string bytes;
  for (int i = 0; i < 300; ++i) {
    std::string back;
    ASSERT_TRUE(base64_decode(base64_encode(bytes), &back)) << i;
    EXPECT_EQ(back, bytes);
    bytes.push_back(static_cast<char>(i * 37));
  }
  EXPECT_EQ(base64_encode("hello world"), "aGVsbG8gd29ybGQ=");
}

TEST(Base64, ReadsWrappedAndUnpaddedTextAndRefusesTheRest) {
  std::string out;
  EXPECT_TRUE(base64_decode("aGVs\nbG8g\r\nd29y bGQ", &out));
  EXPECT_EQ(out, "hello world");
  EXPECT_FALSE(base64_decode("aGVs!G8=", &out)) << "outside the alphabet";
  EXPECT_FALSE(base64_decode("aGVsbG8=d29y", &out)) << "data after padding";
  EXPECT_FALSE(base64_decode("aGVsb", &out)) << "one symbol past a quad is not a byte";
  EXPECT_FALSE(base64_decode("aGV===", &out));
}

}  // namespace
}  // namespace uma
