#include "ipc/line_decoder.h"

#include <gtest/gtest.h>

#include <vector>

namespace uma {
namespace {

std::vector<LineItem> drain(LineDecoder& d) {
  std::vector<LineItem> items;
  while (auto item = d.next()) items.push_back(*item);
  return items;
}

TEST(LineDecoder, NeedsMoreUntilNewline) {
  LineDecoder d(100);
  d.feed("hel");
  EXPECT_FALSE(d.next().has_value());
  d.feed("lo wor");
  EXPECT_FALSE(d.next().has_value());
  d.feed("ld\n");
  auto item = d.next();
  ASSERT_TRUE(item.has_value());
  EXPECT_EQ(item->error, ErrorCode::kOk);
  EXPECT_EQ(item->line, "hello world");
  EXPECT_FALSE(d.next().has_value());
  EXPECT_EQ(d.buffered(), 0u);
}

TEST(LineDecoder, ByteAtATimeAndSeveralLinesInOneRead) {
  LineDecoder d(100);
  const std::string input = "one\r\ntwo\nthree\n";
  std::vector<LineItem> items;
  for (char c : input) {
    d.feed(std::string_view(&c, 1));
    for (auto& i : drain(d)) items.push_back(i);
  }
  ASSERT_EQ(items.size(), 3u);
  EXPECT_EQ(items[0].line, "one");  // CRLF trimmed
  EXPECT_EQ(items[1].line, "two");
  EXPECT_EQ(items[2].line, "three");

  d.feed("a\nb\nc");
  auto batch = drain(d);
  ASSERT_EQ(batch.size(), 2u);
  EXPECT_EQ(batch[1].line, "b");
  d.feed("\n");
  EXPECT_EQ(drain(d).at(0).line, "c");
}

TEST(LineDecoder, RejectsNulInvalidUtf8AndEmpty) {
  LineDecoder d(100);
  d.feed(std::string("a\0b\n", 4));
  d.feed("bad \xC3\x28 utf8\n");
  d.feed("\r\n");
  d.feed("ok \xC3\xA9\n");
  auto items = drain(d);
  ASSERT_EQ(items.size(), 4u);
  EXPECT_EQ(items[0].error, ErrorCode::kContainsNul);
  EXPECT_EQ(items[1].error, ErrorCode::kInvalidUtf8);
  EXPECT_EQ(items[2].error, ErrorCode::kEmptyPrompt);
  EXPECT_EQ(items[3].error, ErrorCode::kOk);
  EXPECT_EQ(items[3].line, "ok \xC3\xA9");
}

TEST(LineDecoder, OversizeIsReportedOnceWithoutBufferingAndResyncs) {
  LineDecoder d(8);
  d.feed("0123456789");  // partial, already over the cap
  auto items = drain(d);
  ASSERT_EQ(items.size(), 1u);
  EXPECT_EQ(items[0].error, ErrorCode::kPromptTooLarge);
  EXPECT_EQ(d.buffered(), 0u);
  for (int i = 0; i < 1000; ++i) d.feed("xxxxxxxxxxxxxxxx");  // the rest of the huge line
  EXPECT_EQ(d.buffered(), 0u);
  EXPECT_FALSE(d.next().has_value());
  d.feed("tail\nnext\n");
  items = drain(d);
  ASSERT_EQ(items.size(), 1u);
  EXPECT_EQ(items[0].line, "next");
}

TEST(LineDecoder, ExactCapIsAcceptedOneMoreIsNot) {
  LineDecoder d(4);
  d.feed("abcd\r\nabcde\n");
  auto items = drain(d);
  ASSERT_EQ(items.size(), 2u);
  EXPECT_EQ(items[0].line, "abcd");
  EXPECT_EQ(items[1].error, ErrorCode::kPromptTooLarge);
}

}  // namespace
}  // namespace uma
