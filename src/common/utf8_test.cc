#include "common/utf8.h"

#include <gtest/gtest.h>

namespace uma {
namespace {

TEST(Utf8, ValidatesStrictly) {
  EXPECT_TRUE(is_valid_utf8("hello"));
  EXPECT_TRUE(is_valid_utf8("h\xC3\xA9llo \xE2\x82\xAC \xF0\x9F\x98\x80"));
  EXPECT_FALSE(is_valid_utf8("\xC3"));              // truncated
  EXPECT_FALSE(is_valid_utf8("\xC0\xAF"));          // overlong '/'
  EXPECT_FALSE(is_valid_utf8("\xED\xA0\x80"));      // surrogate
  EXPECT_FALSE(is_valid_utf8("\xF4\x90\x80\x80"));  // > U+10FFFF
  EXPECT_FALSE(is_valid_utf8("\x80"));              // stray continuation
  EXPECT_FALSE(is_valid_utf8("\xE2\x28\xA1"));      // bad continuation
}

TEST(Utf8Stream, HoldsSplitCodePointUntilComplete) {
  Utf8Stream s;
  EXPECT_EQ(s.push("a\xF0\x9F"), "a");
  EXPECT_TRUE(s.holding());
  EXPECT_EQ(s.push("\x98"), "");
  EXPECT_EQ(s.push("\x80!"), "\xF0\x9F\x98\x80!");
  EXPECT_FALSE(s.holding());
  EXPECT_EQ(s.finish(), "");
}

TEST(Utf8Stream, ReplacesInvalidBytesAndTruncatedTail) {
  Utf8Stream s;
  EXPECT_EQ(s.push("x\x80y"), "x\xEF\xBF\xBDy");
  EXPECT_EQ(s.push("\xE2\x82"), "");
  EXPECT_EQ(s.finish(), "\xEF\xBF\xBD");
  // A lead byte followed by a non-continuation: the lead is replaced, the next byte survives.
  EXPECT_EQ(s.push("\xC3(z"), "\xEF\xBF\xBD(z");
}

TEST(Utf8Stream, OutputIsAlwaysValid) {
  Utf8Stream s;
  std::string all;
  for (int b = 0; b < 256; ++b) {
    std::string out = s.push(std::string(1, static_cast<char>(b)));
    EXPECT_TRUE(is_valid_utf8(out)) << b;
    all += out;
  }
  all += s.finish();
  EXPECT_TRUE(is_valid_utf8(all));
}

}  // namespace
}  // namespace uma
