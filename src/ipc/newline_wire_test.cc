#include "ipc/newline_wire.h"

#include <gtest/gtest.h>

namespace uma {
namespace {

TEST(NewlineWire, EscapesFramingBytesAndRoundTrips) {
  std::string out;
  append_escaped(out, "a\nb\\c\rd");
  EXPECT_EQ(out, "a\\nb\\\\c\\rd");
  EXPECT_EQ(out.find('\n'), std::string::npos);
  EXPECT_EQ(unescape_reply(out), "a\nb\\c\rd");
  const std::string tricky = "\\n literally, then a real\n";
  std::string e;
  append_escaped(e, tricky);
  EXPECT_EQ(unescape_reply(e), tricky);
}

TEST(NewlineWire, EveryErrorCodeHasText) {
  EXPECT_EQ(newline_error_text(ErrorCode::kPromptTooLarge), "prompt too large");
  EXPECT_EQ(newline_error_text(ErrorCode::kInvalidUtf8), "invalid utf-8");
  EXPECT_EQ(newline_error_text(ErrorCode::kDecodeFailed), "decode failed");
  for (int c = 1; c <= static_cast<int>(ErrorCode::kInternal); ++c) {
    EXPECT_FALSE(newline_error_text(static_cast<ErrorCode>(c)).empty());
  }
}

}  // namespace
}  // namespace uma
