#include "ipc/frame_codec.h"

#include <gtest/gtest.h>

#include <vector>

namespace uma {
namespace {

std::vector<FrameItem> drain(FrameDecoder& d) {
  std::vector<FrameItem> out;
  while (auto f = d.next()) {
    out.push_back(*f);
    if (f->error != ErrorCode::kOk) break;  // a refused stream repeats its error forever
  }
  return out;
}

TEST(FrameCodec, ByteAtATime) {
  std::string wire;
  append_frame(wire, R"({"id":"a","prompt":"hi"})");
  FrameDecoder d(1024);
  std::vector<FrameItem> got;
  for (char c : wire) {
    d.feed(std::string_view(&c, 1));
    for (auto& f : drain(d)) got.push_back(f);
  }
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].error, ErrorCode::kOk);
  EXPECT_EQ(got[0].payload, R"({"id":"a","prompt":"hi"})");
  EXPECT_EQ(d.buffered(), 0u);
}

TEST(FrameCodec, SeveralFramesInOneReadAndOneSplitAcrossReads) {
  std::string wire;
  append_frame(wire, "one");
  append_frame(wire, "");
  append_frame(wire, std::string(300, 'x'));
  FrameDecoder d(1024);
  d.feed(wire.substr(0, 20));
  auto first = drain(d);
  ASSERT_EQ(first.size(), 2u);
  EXPECT_EQ(first[0].payload, "one");
  EXPECT_EQ(first[1].payload, "");
  d.feed(wire.substr(20, 100));
  EXPECT_TRUE(drain(d).empty());
  d.feed(wire.substr(120));
  auto rest = drain(d);
  ASSERT_EQ(rest.size(), 1u);
  EXPECT_EQ(rest[0].payload, std::string(300, 'x'));
}

TEST(FrameCodec, OversizeHeaderIsRejectedBeforeThePayloadIsBuffered) {
  FrameDecoder d(1024);
  const char header[4] = {0x00, 0x00, 0x00, 0x40};  // 1 GiB announced
  d.feed(std::string_view(header, 4));
  d.feed(std::string(100, 'x'));
  auto f = d.next();
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->error, ErrorCode::kFrameTooLarge);
  EXPECT_EQ(d.buffered(), 0u);
  for (int i = 0; i < 100; ++i) d.feed(std::string(4096, 'y'));  // the rest of it: not kept
  EXPECT_EQ(d.buffered(), 0u);
  EXPECT_EQ(d.next()->error, ErrorCode::kFrameTooLarge);  // and the stream stays refused
}

TEST(FrameCodec, ExactlyTheCapIsAccepted) {
  std::string wire;
  append_frame(wire, std::string(64, 'z'));
  append_frame(wire, std::string(65, 'z'));
  FrameDecoder d(64);
  d.feed(wire);
  auto items = drain(d);
  ASSERT_EQ(items.size(), 2u);
  EXPECT_EQ(items[0].error, ErrorCode::kOk);
  EXPECT_EQ(items[1].error, ErrorCode::kFrameTooLarge);
}

}  // namespace
}  // namespace uma
