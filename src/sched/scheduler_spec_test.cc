// Speculative decoding in the scheduler: drafts from prompt lookup and a client's prediction,
// verified exactly; what a verifying tick costs and when drafts are declined. The fixture and the
// fake draft model are in spec_test_support.h; the draft model's tests in
// scheduler_draft_model_test.cc.
#include <gtest/gtest.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <memory>

#include "sched/scheduler.h"
#include "sched/spec_test_support.h"

namespace uma {
namespace {

using namespace testing_support;  // SpecSchedulerTest, FakeDrafter, kCopyPrompt, tally (spec_test_support.h)

TEST_F(SpecSchedulerTest, DraftsFromThePromptAreVerifiedAndTheOutputIsTheOneWithoutThem) {
  std::map<RequestId, Outcome> plain;
  int plain_decodes = 0;
  for (bool speculate : {false, true}) {
    start(speculate);
    out_.clear();
    submit(1, kCopyPrompt, 40);
    submit(2, "xyzxyzxyzxy", 30);  // "x y z" repeats; the model says z+1: every draft is rejected
    submit(3, "hello", 12);         // nothing to look up
    run_until_idle();
    if (!speculate) {
      plain = out_;
      plain_decodes = decoder_->decodes_;
      EXPECT_EQ(metrics_.spec_drafted_total.load(), 0u);
      continue;
    }
    for (RequestId id : {1, 2, 3}) {
      EXPECT_EQ(out_[id].text, plain[id].text) << id;
      EXPECT_EQ(out_[id].completion_tokens, plain[id].completion_tokens) << id;
      EXPECT_EQ(out_[id].reason, FinishReason::kLength) << id;
    }
    EXPECT_EQ(out_[1].text, expected(100 + 'c', 40));
    EXPECT_GT(metrics_.spec_accepted_total.load(), 8u) << "d..p were in the prompt";
    // Request 1 took d..p in long accepted runs; request 2's drafts were all rejected.
    ASSERT_GT(metrics_.spec_verifications_total.load(), 0u);
    EXPECT_LT(metrics_.spec_verifications_total.load(), metrics_.spec_drafted_total.load());
    EXPECT_LT(metrics_.spec_accepted_total.load(), metrics_.spec_drafted_total.load()) << "X and the xyz runs are not";
    EXPECT_GT(decoder_->trimmed_tokens_, 0) << "rejected drafts' cells removed";
    EXPECT_LT(decoder_->decodes_, plain_decodes);
    EXPECT_EQ(decoder_->total_kv(), 0) << "every sequence freed, drafts included";
  }
}

TEST_F(SpecSchedulerTest, AStopStringOrMaxTokensInsideAnAcceptedRunEndsTheRequestExactly) {
  for (bool speculate : {false, true}) {
    start(speculate);
    out_.clear();
    // The run d e f g h i j k is all accepted in one tick; the request ends inside it.
    submit(1, kCopyPrompt, 4);
    Request r;
    r.id = 3;
    r.prompt = kCopyPrompt;
    r.max_tokens = 30;
    r.stop = {"<" + std::to_string(100 + 'g') + ">"};
    submit(std::move(r));
    run_until_idle();
    EXPECT_EQ(out_[1].text, expected(100 + 'c', 4)) << speculate;
    EXPECT_EQ(out_[1].completion_tokens, 4);
    EXPECT_EQ(out_[3].text, expected(100 + 'c', 3)) << "d e f, then the stop string g";
    EXPECT_EQ(out_[3].reason, FinishReason::kStop);
    EXPECT_EQ(decoder_->total_kv(), 0);
    // A later request sharing the kept prefix reads cells that match its tokens (the fake checks).
    submit(4, kCopyPrompt + "defg", 6);
    run_until_idle();
    EXPECT_EQ(out_[4].text, expected(100 + 'g', 6));
  }
}

TEST_F(SpecSchedulerTest, ARequestThatSaysNoIsNeverDraftedFor) {
  start(true);
  Request r;
  r.id = 1;
  r.prompt = kCopyPrompt;
  r.max_tokens = 20;
  r.speculative = false;
  submit(std::move(r));
  run_until_idle();
  EXPECT_EQ(out_[1].text, expected(100 + 'c', 20));
  EXPECT_EQ(metrics_.spec_drafted_total.load(), 0u);
  EXPECT_EQ(decoder_->trims_, 0);
}

TEST_F(SpecSchedulerTest, PerSequenceKvStreamsVerifyDraftsInOnePassWhenEveryStreamDrafts) {
  start(true, /*per_seq=*/true, /*n_seq=*/8);
  submit(1, kCopyPrompt, 24);
  run_until_idle();
  EXPECT_EQ(out_[1].text, expected(100 + 'c', 24));
  EXPECT_GT(metrics_.spec_accepted_total.load(), 0u);
  const std::uint64_t alone = metrics_.spec_drafted_total.load();
  // Six copying at once draft alike: each tick's rows stay one pass per sequence run.
  for (RequestId id = 2; id <= 7; ++id) submit(id, kCopyPrompt, 24);
  run_until_idle();
  for (RequestId id = 2; id <= 7; ++id) EXPECT_EQ(out_[id].text, expected(100 + 'c', 24)) << id;
  EXPECT_GT(metrics_.spec_drafted_total.load(), alone);
  // Beside streams with nothing to look up, the drafts would be passes of their own: whatever
  // the plan decides, every output is exact and no cell is left.
  for (RequestId id = 8; id <= 10; ++id) submit(id, id == 8 ? kCopyPrompt : std::string(1, static_cast<char>('a' + id)), 24);
  run_until_idle();
  EXPECT_EQ(out_[8].text, expected(100 + 'c', 24));
  for (RequestId id = 9; id <= 10; ++id) EXPECT_EQ(out_[id].text, expected(100 + 'a' + static_cast<Token>(id), 24)) << id;
  EXPECT_EQ(decoder_->total_kv(), 0);
}

TEST_F(SpecSchedulerTest, PerSequenceKvStreamsWhoseDraftsDifferVerifyTheSameRowsEach) {
  start(true, /*per_seq=*/true, /*n_seq=*/8);
  // Two streams copy a run (their drafts are accepted); two find, for each token, an earlier
  // occurrence followed by "!" (theirs are rejected, their acceptance falls): every stream drafts
  // every tick, drafts of unequal worth. All prompts are 76 characters, so a position from 77 on is
  // a decode row.
  std::string pairs, run;
  for (char c = 'a'; c < 'z'; ++c) pairs += std::string{c, static_cast<char>(c + 1), '!'};
  for (char c = '('; c < 'Z'; ++c) run += c;
  const std::string wrong = pairs + "a";                    // then b, c, ...: each lookup proposes "!"
  const std::string tail = run + "~()*";                     // then + , - ...: the run again
  const std::string copy = std::string(wrong.size() - tail.size(), '~') + tail;
  const auto prompt_len = static_cast<std::int32_t>(wrong.size() + 1);
  // Each decode that verifies: whether every decoding sequence carried as many rows (one pass).
  int verifying = 0, uneven = 0;
  decoder_->on_decode_ = [&](std::span<const BatchEntry> b) {
    std::map<std::int32_t, int> rows;
    for (const BatchEntry& e : b) rows[e.seq] += 1;
    const bool decoding = std::all_of(b.begin(), b.end(), [&](const BatchEntry& e) { return e.pos >= prompt_len; });
    const auto [lo, hi] = std::minmax_element(rows.begin(), rows.end(), [](const auto& x, const auto& y) { return x.second < y.second; });
    if (decoding && hi->second > 1) verifying += 1, uneven += lo->second != hi->second;
    clock_.advance(std::chrono::microseconds(10000 + 200 * static_cast<long>(b.size())));
  };
  submit(1, copy, 24);
  submit(2, copy, 24);
  submit(3, wrong, 24);
  submit(4, wrong, 24);
  run_until_idle();
  EXPECT_EQ(out_[1].text, expected(100 + '*', 24));
  EXPECT_EQ(out_[2].text, expected(100 + '*', 24));
  EXPECT_EQ(out_[3].text, expected(100 + 'a', 24));
  EXPECT_EQ(out_[4].text, expected(100 + 'a', 24));
  EXPECT_EQ(decoder_->total_kv(), 0);
  // The copying streams' run is verified in one pass beside the others' rejected drafts: most of
  // their 2 x 24 tokens were drafts (36 here; 10 where uneven plans were declined as passes).
  EXPECT_GE(metrics_.spec_accepted_total.load(), 30u);
  EXPECT_GT(verifying, 0);
  EXPECT_EQ(uneven, 0);
}

TEST_F(SpecSchedulerTest, AVerifyingTickAsksForNoMoreLogitsRowsThanTheDecoderReserved) {
  // Forced (every draft verified, whatever it costs): only the reserve holds the rows back.
  SchedulerConfig cfg;
  cfg.speculate = true;
  cfg.speculate_always = true;
  make(256, 4096, 8, cfg);
  decoder_->outputs_reserved_ = 10;
  for (RequestId id = 1; id <= 4; ++id) submit(id, kCopyPrompt, 20);
  run_until_idle();
  for (RequestId id = 1; id <= 4; ++id) EXPECT_EQ(out_[id].text, expected(100 + 'c', 20)) << id;
  EXPECT_GT(metrics_.spec_accepted_total.load(), 0u);
  EXPECT_EQ(decoder_->total_kv(), 0);
}

TEST_F(SpecSchedulerTest, DearRowsTurnSpeculationOff) {
  SchedulerConfig cfg;
  make(256, 4096, 8, cfg);
  // Every row costs what the tick's fixed part does: a draft row never pays for itself.
  decoder_->on_decode_ = [this](std::span<const BatchEntry> b) {
    clock_.advance(std::chrono::microseconds(100 + 5000 * static_cast<long>(b.size())));
  };
  ASSERT_TRUE(scheduler_->calibrate(1e9).ok());
  for (RequestId id = 1; id <= 4; ++id) submit(id, kCopyPrompt, 20);
  run_until_idle();
  for (RequestId id = 1; id <= 4; ++id) EXPECT_EQ(out_[id].text, expected(100 + 'c', 20));
  EXPECT_EQ(metrics_.spec_drafted_total.load(), 0u);
  EXPECT_GT(metrics_.spec_declined_ticks_total.load(), 0u);
}

TEST_F(SpecSchedulerTest, AVerifyingTickTakesAtMostTwiceAPlainOne) {
  start(true);
  // 10 ms a tick and 2 ms a row: drafts accepted nearly always would pay up to 16 rows a stream,
  // a 44 ms gap. Each verifying tick stays within twice a plain one, as the cost model predicts.
  std::size_t most = 0;
  std::string run;
  for (char c = '!'; c <= '~'; ++c) run += c;
  const auto prompt = static_cast<std::int32_t>(run.size() + 3);
  bool served = false;  // past calibration
  decoder_->on_decode_ = [this, &most, &served, prompt](std::span<const BatchEntry> b) {
    const bool decoding = std::all_of(b.begin(), b.end(), [&](const BatchEntry& e) { return e.pos >= prompt; });
    if (served && decoding) most = std::max(most, b.size());
    clock_.advance(std::chrono::microseconds(10000 + 2000 * static_cast<long>(b.size())));
  };
  ASSERT_TRUE(scheduler_->calibrate(1e9).ok());
  served = true;
  submit(1, run + "!\"#", 60);
  run_until_idle();
  EXPECT_EQ(out_[1].text, expected(100 + '#', 60));
  EXPECT_GT(metrics_.spec_accepted_total.load(), 10u);
  // Uncapped, a tick would carry the row and 16 drafts. The cap is on the cost model's
  // prediction, whose fit here prices a draft row below its 2 ms: fewer rows than that, more
  // than the six that 2 ms each would allow.
  EXPECT_LT(most, 17u);
  EXPECT_GE(most, 4u);
}

TEST_F(SpecSchedulerTest, WhatAVerifyingTickCostsBeyondItsRowsIsLearnt) {
  double without = 0.0;
  for (int shape_ms : {0, 8}) {
    start(true);
    out_.clear();
    // A GPU-like decoder: a batch of a new size builds its graph (shape_ms), into the verifying
    // tick and again into the one after it, back to a row a session.
    auto last = std::make_shared<std::size_t>(0);
    decoder_->on_decode_ = [this, shape_ms, last](std::span<const BatchEntry> b) {
      const long build = b.size() != *last ? 1000L * shape_ms : 0L;
      *last = b.size();
      clock_.advance(std::chrono::microseconds(10000 + 200 * static_cast<long>(b.size()) + build));
    };
    for (RequestId id = 1; id <= 3; ++id) submit(id, kCopyPrompt, 40);
    run_until_idle();
    for (RequestId id = 1; id <= 3; ++id) EXPECT_EQ(out_[id].text, expected(100 + 'c', 40)) << shape_ms;
    ASSERT_GT(metrics_.spec_ticks_total.load(), 0u);
    const double learnt = metrics_.spec_overhead_ms.load();
    if (shape_ms == 0) {
      EXPECT_LT(learnt, 2.0) << "the rows alone, as the cost model predicts them";
      without = learnt;
    } else {
      // Two graph builds for one verifying tick, less what the cost model's own fit absorbs of them.
      EXPECT_GT(learnt - without, 0.5 * shape_ms);
    }
  }
}

TEST_F(SpecSchedulerTest, WhatVerifyingCostsAtSixteenStreamsIsNotChargedToALoneOne) {
  start(true, /*per_seq=*/false, /*n_seq=*/16);
  // A verifying tick of many streams costs 300 ms beyond its rows (as a draft model's catch-up of
  // sixteen sequences costs more than one's on a CPU); one of a lone stream only its rows.
  decoder_->on_decode_ = [this](std::span<const BatchEntry> b) {
    std::set<std::int32_t> seqs;
    for (const BatchEntry& e : b) seqs.insert(e.seq);
    const auto rows = std::count_if(b.begin(), b.end(), [](const BatchEntry& e) { return e.logits; });
    const long extra = static_cast<std::size_t>(rows) > seqs.size() && seqs.size() >= 8 ? 300000 : 0;
    clock_.advance(std::chrono::microseconds(10000 + 200 * static_cast<long>(b.size()) + extra));
  };
  for (RequestId id = 1; id <= 16; ++id) submit(id, kCopyPrompt, 40);
  run_until_idle();
  ASSERT_GT(metrics_.spec_ticks_total.load(), 0u);
  EXPECT_GT(metrics_.spec_overhead_ms.load(), 50.0) << "learnt at sixteen";
  // A lone stream copying a long run (the ascending characters from '!'): 300 ms more a verifying
  // tick would never pay, its rows alone do.
  std::string run;
  for (char c = '!'; c <= '~'; ++c) run += c;
  const std::uint64_t before = metrics_.spec_ticks_total.load();
  submit(100, run + "!\"#", 60);
  run_until_idle();
  EXPECT_EQ(out_[100].text, expected(100 + '#', 60));
  EXPECT_GT(metrics_.spec_ticks_total.load(), before + 2) << "the lone stream verifies";
  EXPECT_LT(metrics_.spec_overhead_ms.load(), 50.0) << "at its own cost";
}

TEST_F(SpecSchedulerTest, APredictionOfTheOutputIsVerifiedAndTakenUpAgainAfterAnEdit) {
  for (bool with : {false, true}) {
    start(true);
    out_.clear();
    // "abc": the model goes on d, e, f, ... (nothing to look up). The prediction has it right up to
    // h, then an edit ("XY" where i j come), then right again from k.
    Request r;
    r.id = 1;
    r.prompt = "abc";
    r.max_tokens = 20;
    if (with) r.prediction = "defghXYklmnopqrstuvw";
    submit(std::move(r));
    run_until_idle();
    EXPECT_EQ(out_[1].text, expected(100 + 'c', 20)) << with;
    if (!with) {
      EXPECT_EQ(metrics_.spec_drafted_total.load(), 0u);
      EXPECT_EQ(out_[1].accepted_prediction + out_[1].rejected_prediction, 0);
      continue;
    }
    // d..h and m..w (after "k l" realigned it) accepted; X (and what followed it in that draft) rejected.
    EXPECT_GE(out_[1].accepted_prediction, 5 + 8);
    EXPECT_GE(out_[1].rejected_prediction, 1);
    EXPECT_EQ(static_cast<std::uint64_t>(out_[1].accepted_prediction), metrics_.spec_accepted_total.load());
    EXPECT_EQ(decoder_->total_kv(), 0);
  }
}

}  // namespace
}  // namespace uma
