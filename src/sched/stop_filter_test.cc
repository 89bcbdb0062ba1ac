#include "sched/stop_filter.h"

#include <gtest/gtest.h>

namespace uma {
namespace {

// Pushes pieces; returns everything emitted and whether (and at which piece) a stop matched.
std::string run(StopFilter& f, const std::vector<std::string>& pieces, int* matched_at) {
  std::string out;
  *matched_at = -1;
  for (size_t i = 0; i < pieces.size(); ++i) {
    bool matched = false;
    out += f.push(pieces[i], &matched);
    if (matched) {
      *matched_at = static_cast<int>(i);
      return out;
    }
  }
  return out + f.flush();
}

TEST(StopFilter, MatchesAcrossTokenBoundariesAndNeverEmitsTheStop) {
  StopFilter f({"END"});
  int at = 0;
  EXPECT_EQ(run(f, {"hello E", "N", "D and more"}, &at), "hello ");
  EXPECT_EQ(at, 2);
}

TEST(StopFilter, HoldsOnlyWhatCouldBecomeAStop) {
  StopFilter f({"stop here"});
  bool m = false;
  EXPECT_EQ(f.push("abc st", &m), "abc ");  // "st" may start "stop here"
  EXPECT_FALSE(m);
  EXPECT_EQ(f.push("ep", &m), "step");       // diverged: released
  EXPECT_EQ(f.push(" s", &m), " ");
  EXPECT_EQ(f.flush(), "s");                 // end for another reason: held text is text
}

TEST(StopFilter, EarliestOfSeveralStopsWins) {
  StopFilter f({"\n\n", "###", "x"});
  int at = 0;
  EXPECT_EQ(run(f, {"a#", "#", "#b\n\nx"}, &at), "a");
  EXPECT_EQ(at, 2);
}

TEST(StopFilter, MultiByteTextIsNeverCutInsideACodePoint) {
  StopFilter f({"\xC3\xA9t\xC3\xA9"});  // "été"
  int at = 0;
  EXPECT_EQ(run(f, {"caf\xC3\xA9", " \xC3\xA9", "t\xC3\xA9!"}, &at), "caf\xC3\xA9 ");
  EXPECT_EQ(at, 2);
}

TEST(StopFilter, NoStopsPassesThroughAndEmptyStopsAreIgnored) {
  StopFilter f({""});
  EXPECT_TRUE(f.empty());
  bool m = true;
  EXPECT_EQ(f.push("anything", &m), "anything");
  EXPECT_FALSE(m);
}

}  // namespace
}  // namespace uma
