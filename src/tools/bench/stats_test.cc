#include "tools/bench/stats.h"

#include <gtest/gtest.h>

namespace uma::bench {
namespace {

using std::chrono::milliseconds;

TEST(BenchStats, NearestRankPercentiles) {
  std::vector<double> v;
  for (int i = 1; i <= 100; ++i) v.push_back(i);
  const Summary s = summarize(v);
  EXPECT_EQ(s.n, 100u);
  EXPECT_DOUBLE_EQ(s.p50, 50);
  EXPECT_DOUBLE_EQ(s.p90, 90);
  EXPECT_DOUBLE_EQ(s.p95, 95);
  EXPECT_DOUBLE_EQ(s.p99, 99);
  EXPECT_DOUBLE_EQ(s.max, 100);
  EXPECT_DOUBLE_EQ(s.mean, 50.5);
  const Summary one = summarize({7.0});
  EXPECT_DOUBLE_EQ(one.p50, 7);
  EXPECT_DOUBLE_EQ(one.p99, 7);
  const Summary few = summarize({3.0, 1.0, 2.0});  // unsorted input
  EXPECT_DOUBLE_EQ(few.p50, 2);
  EXPECT_DOUBLE_EQ(few.p90, 3);
  EXPECT_EQ(summarize({}).n, 0u);
}

RequestRecord record(Clock::time_point t0, int ttft_ms, std::vector<int> gaps_ms) {
  RequestRecord r;
  r.ok = true;
  r.sent = t0;
  Clock::time_point t = t0 + milliseconds(ttft_ms);
  r.tokens.push_back(t);
  for (int g : gaps_ms) r.tokens.push_back(t += milliseconds(g));
  r.done = t;
  r.completion_tokens = static_cast<int>(r.tokens.size());
  return r;
}

TEST(BenchStats, ReportDerivesTtftTpotItlThroughputAndGoodput) {
  const Clock::time_point t0{};
  std::vector<RequestRecord> recs = {
      record(t0, 100, {10, 10, 10}),                    // ttft 100, tpot 10
      record(t0 + milliseconds(500), 300, {20, 40}),    // ttft 300, tpot 30
  };
  RequestRecord failed;
  failed.error = "E_OVERLOADED";
  failed.sent = t0;
  failed.done = t0 + milliseconds(1);
  recs.push_back(failed);

  const RunReport rep = build_report(recs, SloTargets{200, 20});
  EXPECT_EQ(rep.requests, 3u);
  EXPECT_EQ(rep.ok, 2u);
  EXPECT_EQ(rep.errors.at("E_OVERLOADED"), 1u);
  EXPECT_DOUBLE_EQ(rep.ttft_ms.p50, 100);
  EXPECT_DOUBLE_EQ(rep.ttft_ms.max, 300);
  EXPECT_DOUBLE_EQ(rep.tpot_ms.max, 30);
  EXPECT_EQ(rep.itl_ms.n, 5u);  // 3 gaps + 2 gaps
  EXPECT_DOUBLE_EQ(rep.itl_ms.max, 40);
  // Duration: first send (t0) to last done (t0 + 500 + 300 + 60 = 860 ms).
  EXPECT_NEAR(rep.duration_s, 0.860, 1e-9);
  EXPECT_EQ(rep.output_tokens, 7);
  EXPECT_NEAR(rep.output_tok_s, 7 / 0.860, 1e-9);
  EXPECT_EQ(rep.slo_met, 1u);  // only the first meets ttft <= 200 and tpot <= 20
  EXPECT_NEAR(rep.goodput_req_s, 1 / 0.860, 1e-9);
  EXPECT_EQ(build_report(recs, SloTargets{}).slo_met, 2u) << "no targets: every ok request counts";
}

TEST(Stats, InterTokenGapsSplitByOverlapWithLongPromptPrefill) {
  const Clock::time_point t0{};
  auto at = [&](int ms) { return t0 + std::chrono::milliseconds(ms); };
  RequestRecord stream;
  stream.ok = true;
  stream.tokens = {at(0), at(10), at(20), at(120), at(130), at(140)};  // the 100 ms gap spans the prefill
  RequestRecord long_prompt;
  long_prompt.ok = true;
  long_prompt.sent = at(50);
  long_prompt.tokens = {at(125)};  // prefill window [50, 125]
  const ItlSplit s = split_itl_by_prefill({stream}, {long_prompt});
  EXPECT_EQ(s.steady_ms.n, 3u);  // 0-10, 10-20, 130-140
  EXPECT_DOUBLE_EQ(s.steady_ms.max, 10);
  EXPECT_EQ(s.during_prefill_ms.n, 2u);  // 20-120 and 120-130 overlap [50, 125]
  EXPECT_DOUBLE_EQ(s.during_prefill_ms.max, 100);
}

}  // namespace
}  // namespace uma::bench
