#include "gateway/sse_events.h"

#include <gtest/gtest.h>

namespace uma::gateway {
namespace {

const std::string kStream =
    ": tokens 14 15\ndata: {\"a\":1}\n\n"
    ": ping\n\n"
    "data: {\"error\":{\"message\":\"x\"}}\n\n"
    ": tokens 16\ndata: {\"b\":2}\n\n"
    "data: [DONE]\n\n";

std::vector<SseEvent> feed_in_pieces(const std::string& s, std::size_t piece) {
  SseEvents r;
  std::vector<SseEvent> out;
  for (std::size_t at = 0; at < s.size(); at += piece) EXPECT_TRUE(r.feed(s.substr(at, piece), &out).ok());
  EXPECT_EQ(r.pending(), 0u);
  return out;
}

TEST(SseEvents, EventsComeWholeWithTheirTokensAndWithoutTheCommentsInAnyPieces) {
  for (std::size_t piece : {std::size_t{1}, std::size_t{3}, std::size_t{7}, kStream.size()}) {
    const std::vector<SseEvent> ev = feed_in_pieces(kStream, piece);
    ASSERT_EQ(ev.size(), 4u) << piece;
    EXPECT_EQ(ev[0].forward, "data: {\"a\":1}\n\n");
    EXPECT_EQ(ev[0].tokens, (std::vector<std::int32_t>{14, 15}));
    EXPECT_TRUE(ev[1].error);
    EXPECT_TRUE(ev[1].tokens.empty());
    EXPECT_EQ(ev[2].tokens, std::vector<std::int32_t>{16});
    EXPECT_FALSE(ev[2].done);
    EXPECT_TRUE(ev[3].done);
    EXPECT_EQ(ev[3].forward, "data: [DONE]\n\n");
  }
}

TEST(SseEvents, BadTokenCommentsAndOversizedEventsAreErrors) {
  SseEvents r;
  std::vector<SseEvent> out;
  EXPECT_EQ(r.feed(": tokens 1 x\ndata: {}\n\n", &out).code(), ErrorCode::kBadRequest);
  SseEvents small(16);
  EXPECT_EQ(small.feed("data: 0123456789abcdef", &out).code(), ErrorCode::kBadRequest);
}

}  // namespace
}  // namespace uma::gateway
