// Speculative decoding in the scheduler, against the fake decoder (its "model" predicts token + 1
// and it checks that every position is contiguous, so a draft's rejected cells left in KV, or an
// n_past that disagrees with the KV, fails the next decode).
#include <gtest/gtest.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <memory>

#include "sched/scheduler.h"
#include "sched/scheduler_test_support.h"

namespace uma {
namespace {

using testing_support::Outcome;
using testing_support::SchedulerTest;

// "abcdefghijklmnop XYZ abc": after the last "abc" the model goes on d, e, f, ...: the prompt
// holds that run up to p, then X, which the model does not predict.
const std::string kCopyPrompt = "abcdefghijklmnopXYZabc";

class SpecSchedulerTest : public SchedulerTest {
 protected:
  void start(bool speculate, bool per_seq = false, std::int32_t n_seq = 8) {
    SchedulerConfig cfg;
    cfg.speculate = speculate;
    make(/*n_batch=*/256, /*n_ctx=*/4096, n_seq, cfg, per_seq);
    // 10 ms a tick and 0.2 ms a token: rows are cheap next to the tick, as on a lone stream.
    decoder_->on_decode_ = [this](std::span<const BatchEntry> b) {
      clock_.advance(std::chrono::microseconds(10000 + 200 * static_cast<long>(b.size())));
    };
    ASSERT_TRUE(scheduler_->calibrate(1e9).ok());
  }
  // Two 600-token streams on a GPU-like device: a decode runs from its launch (or the device's last
  // work) for device_us(rows), synchronize() waits for it, and the compute loop spends host_us
  // after each tick. Returns the virtual ms until both ended, their outputs checked exact and
  // their KV freed; `drafter` (may be null) drafts for them.
  double two_streams_on_async_device(const std::function<long(std::span<const BatchEntry>)>& device_us, long host_us,
                                     Drafter* drafter) {
    start(true);
    out_.clear();
    decoder_->async_ = true;
    auto busy_until = std::make_shared<Clock::time_point>();
    decoder_->on_decode_ = [this, busy_until, device_us](std::span<const BatchEntry> b) {
      *busy_until = std::max(*busy_until, clock_.now()) + std::chrono::microseconds(device_us(b));
    };
    decoder_->on_synchronize_ = [this, busy_until] {
      if (clock_.now() < *busy_until) clock_.advance(std::chrono::duration_cast<std::chrono::microseconds>(*busy_until - clock_.now()));
    };
    if (drafter != nullptr) scheduler_->set_drafter(drafter);
    submit(1, "b", 600);
    submit(2, "c", 600);
    const Clock::time_point t0 = clock_.now();
    while (scheduler_->has_work()) {
      scheduler_->tick(events_);
      collect();
      clock_.advance(std::chrono::microseconds(host_us));
    }
    EXPECT_EQ(out_[1].text, expected(100 + 'b', 600));
    EXPECT_EQ(out_[2].text, expected(100 + 'c', 600));
    EXPECT_EQ(decoder_->total_kv(), 0);
    scheduler_.reset();
    return std::chrono::duration<double, std::milli>(clock_.now() - t0).count();
  }
};

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
  // sixteen sequences cost more than one's on this CPU); one of a lone stream only its rows.
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

// A draft model for the fake "model" (token + 1): after token t it proposes t + 1 where `agree(t)`,
// else t + 2; it checks the jobs it gets.
class FakeDrafter final : public Drafter {
 public:
  explicit FakeDrafter(std::function<bool(Token)> agree) : agree_(std::move(agree)) {}
  Status draft(std::span<const DraftJob> jobs) override {
    ++calls_;
    last_fed_ = 0;
    for (const DraftJob& j : jobs) {
      last_fed_ += lag(j.seq, j.tokens);
      fed_[j.seq] = j.tokens.size();
    }
    if (on_draft_) on_draft_();
    for (const DraftJob& j : jobs) {
      EXPECT_GT(j.k, 0);
      EXPECT_FALSE(j.tokens.empty());
      j.out->clear();
      Token t = j.tokens.back();
      for (std::int32_t i = 0; i < j.k; ++i) j.out->push_back(t = agree_(t) ? t + 1 : t + 2);
      drafted_ += j.k;
    }
    return Status::Ok();
  }
  void forget(std::int32_t seq) override {
    forgotten_.push_back(seq);
    fed_.erase(seq);
  }
  double step_ms(std::size_t) const override { return 0.5; }
  // It holds what it was given last (its proposals aside): the rest is caught up.
  std::size_t lag(std::int32_t seq, std::span<const Token> tokens) const override {
    const auto it = fed_.find(seq);
    return tokens.size() - (it == fed_.end() ? 0 : std::min(it->second, tokens.size() - 1));
  }
  double catch_up_ms(std::size_t tokens) const override { return catch_up_ms_per_token_ * static_cast<double>(tokens); }
  double catch_up_ms_per_token_ = 0.0;
  std::size_t last_fed_ = 0;  // tokens the last call caught up
  int calls_ = 0;
  std::int32_t drafted_ = 0;
  std::function<void()> on_draft_;  // what a call costs (the test's clock)
  std::vector<std::int32_t> forgotten_;

 private:
  std::function<bool(Token)> agree_;
  std::map<std::int32_t, std::size_t> fed_;
};

TEST_F(SpecSchedulerTest, DraftModelProposalsAgreeingNoneHalfOrAllLeaveEveryOutputExact) {
  // Prompts with nothing to look up: every draft comes from the draft model.
  for (int share : {0, 50, 100}) {
    start(true);
    out_.clear();
    FakeDrafter drafter([share](Token t) { return share == 100 || (share == 50 && t % 2 == 0); });
    scheduler_->set_drafter(&drafter);
    for (RequestId id = 1; id <= 6; ++id) submit(id, std::string(1, static_cast<char>('a' + id)), 30);
    run_until_idle();
    for (RequestId id = 1; id <= 6; ++id) EXPECT_EQ(out_[id].text, expected(100 + 'a' + static_cast<Token>(id), 30)) << share << "% " << id;
    const double drafted = static_cast<double>(metrics_.spec_drafted_total.load());
    const double accepted = static_cast<double>(metrics_.spec_accepted_total.load());
    EXPECT_GT(drafter.calls_, 0) << share;
    if (share == 0) { EXPECT_EQ(accepted, 0.0); }
    if (share == 100) { EXPECT_EQ(accepted, drafted); }
    if (share == 50) {
      EXPECT_GT(accepted, 0.0);
      EXPECT_LT(accepted, drafted);
    }
    EXPECT_EQ(decoder_->total_kv(), 0);
    EXPECT_EQ(drafter.forgotten_.size(), 6u) << "every finished sequence is forgotten";
    scheduler_.reset();  // before the drafter it holds
    metrics_.spec_drafted_total = 0;
    metrics_.spec_accepted_total = 0;
  }
}

TEST_F(SpecSchedulerTest, TheDraftModelDraftsOnlyForTicksThatVerify) {
  // A draft model whose calls cost 30 ms against a 10 ms tick: the cost model prices its step at
  // 0.5 ms and plans drafts, the yield guard measures that verifying ticks lose and declines them.
  // A declined tick drafts nothing (it drafted for nothing: 12 ms a tick at 16 streams on a CPU).
  start(true);
  FakeDrafter drafter([](Token t) { return t % 2 == 0; });
  drafter.on_draft_ = [this] { clock_.advance(std::chrono::microseconds(30000)); };
  scheduler_->set_drafter(&drafter);
  for (RequestId id = 1; id <= 4; ++id) submit(id, std::string(1, static_cast<char>('a' + id)), 200);
  run_until_idle();
  for (RequestId id = 1; id <= 4; ++id) EXPECT_EQ(out_[id].text, expected(100 + 'a' + static_cast<Token>(id), 200)) << id;
  EXPECT_GT(metrics_.spec_declined_ticks_total.load(), 100u);
  EXPECT_GT(metrics_.spec_ticks_total.load(), 0u);
  EXPECT_EQ(static_cast<std::uint64_t>(drafter.calls_), metrics_.spec_ticks_total.load());
  scheduler_.reset();  // before the drafter it holds
}

TEST_F(SpecSchedulerTest, APromptsCatchUpInTheDraftModelIsPaidOnlyWhereAProbeEarnsItBack) {
  // Rows cheap (10 ms a tick, 0.2 ms a row), a draft model agreeing always, feeding a prompt at
  // 0.1 ms a token: one 100-token stream's catch-up pays within a probe, eight streams' does not.
  for (const RequestId streams : {1, 8}) {
    start(true);
    out_.clear();
    FakeDrafter drafter([](Token) { return true; });
    drafter.catch_up_ms_per_token_ = 0.1;
    drafter.on_draft_ = [this, &drafter] { clock_.advance(std::chrono::microseconds(static_cast<long>(100 * drafter.last_fed_))); };
    scheduler_->set_drafter(&drafter);
    // Prompts of 100 distinct tokens: nothing for a lookup to find.
    std::map<RequestId, char> last;
    for (RequestId id = 1; id <= streams; ++id) {
      std::string prompt;
      for (int i = 0; i < 100; ++i) prompt += static_cast<char>(33 + (i * 7 + static_cast<int>(id) * 13) % 90);
      last[id] = prompt.back();
      submit(id, prompt, 40);
    }
    run_until_idle();
    for (RequestId id = 1; id <= streams; ++id) EXPECT_EQ(out_[id].text, expected(100 + last[id], 40)) << id;
    if (streams == 1) {
      EXPECT_GT(drafter.calls_, 0);
    } else {
      EXPECT_EQ(drafter.calls_, 0) << "eight prompts caught up for one probe";
    }
    EXPECT_EQ(decoder_->total_kv(), 0);
    scheduler_.reset();  // before the drafter it holds
  }
}

TEST_F(SpecSchedulerTest, WhereVerifyingLostAProbeIsNotPricedOutByTheDraftModelsGrowingCatchUp) {
  // A lone stream, a draft model right 6 times in 10 whose catch-up is estimated dear (3 ms a
  // token on a 10 ms tick: an H200's estimate was 0.7 ms on a 3 ms tick). Its first calls are slow
  // (30 ms: a device still cold), so verifying is measured to lose; then they are quick. Each
  // declined tick adds a token to the draft model's lag: charged to a probe, its catch-up soon
  // outweighs all the probe can win and drafts never come back (9 tokens accepted; 117 here).
  SchedulerConfig cfg;
  cfg.speculate = true;
  cfg.draft_max = 4;
  make(256, 4096, 8, cfg);
  decoder_->on_decode_ = [this](std::span<const BatchEntry> b) {
    clock_.advance(std::chrono::microseconds(10000 + 200 * static_cast<long>(b.size())));
  };
  ASSERT_TRUE(scheduler_->calibrate(1e9).ok());
  FakeDrafter drafter([](Token t) { return (t * 7919) % 10 < 6; });
  drafter.catch_up_ms_per_token_ = 3.0;
  drafter.on_draft_ = [this, &drafter] { clock_.advance(std::chrono::microseconds(drafter.calls_ <= 8 ? 30000 : 300)); };
  scheduler_->set_drafter(&drafter);
  submit(1, "QRST", 600);  // ascending: nothing for a lookup to find
  run_until_idle();
  EXPECT_EQ(out_[1].text, expected(100 + 'T', 600));
  EXPECT_EQ(decoder_->total_kv(), 0);
  // Verifying lost first, then probes came and won: drafts came back.
  EXPECT_GT(metrics_.spec_declined_ticks_total.load(), 0u);
  EXPECT_GT(metrics_.spec_accepted_total.load(), 60u);
  scheduler_.reset();  // before the drafter it holds
}

TEST_F(SpecSchedulerTest, ALookupDraftGoesBeforeTheDraftModel) {
  start(true);
  FakeDrafter drafter([](Token) { return true; });
  scheduler_->set_drafter(&drafter);
  submit(1, kCopyPrompt, 12);  // the run d e f ... is in the prompt
  run_until_idle();
  EXPECT_EQ(out_[1].text, expected(100 + 'c', 12));
  EXPECT_GT(metrics_.spec_accepted_total.load(), 0u);
  EXPECT_EQ(drafter.drafted_, 0) << "lookup found drafts every tick: the model was not asked";
  scheduler_.reset();
}

TEST_F(SpecSchedulerTest, WhereDraftsDoNotPayTheTicksArePipelinedAndProbesStillCome) {
  start(true);
  decoder_->async_ = true;  // a GPU's decode: the pipelined tick may launch the next one early
  FakeDrafter drafter([](Token) { return false; });  // every draft rejected
  scheduler_->set_drafter(&drafter);
  submit(1, "b", 400);
  submit(2, "c", 400);
  run_until_idle();
  EXPECT_EQ(out_[1].text, expected(100 + 'b', 400));
  EXPECT_EQ(out_[2].text, expected(100 + 'c', 400));
  // Once speculation is declined for two rows, most ticks are pipelined; drafts are still tried
  // now and then (the acceptance estimate drifts back, the yield guard probes), never every tick.
  EXPECT_GT(metrics_.pipelined_ticks_total.load(), 300u) << drafter.calls_;
  EXPECT_GT(drafter.calls_, 0);
  EXPECT_LT(drafter.calls_, 60);
  EXPECT_EQ(decoder_->total_kv(), 0);
  scheduler_.reset();
}

TEST_F(SpecSchedulerTest, DraftsTheCostDeclinesDoNotStopThePipelineAsStreamsEnd) {
  // Dear rows (each as dear as the tick): the plan declines every draft. Eight streams end five
  // ticks apart, so the decode rows change within the yield guard's bucket: the ticks are
  // pipelined as many times as without a draft model at all.
  std::uint64_t without = 0;
  for (bool drafting : {false, true}) {
    make(256, 4096, 8, SchedulerConfig{});
    out_.clear();
    decoder_->async_ = true;
    decoder_->on_decode_ = [this](std::span<const BatchEntry> b) {
      clock_.advance(std::chrono::microseconds(100 + 5000 * static_cast<long>(b.size())));
    };
    ASSERT_TRUE(scheduler_->calibrate(1e9).ok());
    FakeDrafter drafter([](Token) { return true; });
    if (drafting) scheduler_->set_drafter(&drafter);
    const std::uint64_t before = metrics_.pipelined_ticks_total.load();
    for (RequestId id = 1; id <= 8; ++id) submit(id, std::string(1, static_cast<char>('a' + id)), 20 + 5 * static_cast<std::int32_t>(id));
    run_until_idle();
    for (RequestId id = 1; id <= 8; ++id) EXPECT_EQ(out_[id].text, expected(100 + 'a' + static_cast<Token>(id), 20 + 5 * static_cast<std::int32_t>(id)));
    const std::uint64_t pipelined = metrics_.pipelined_ticks_total.load() - before;
    if (!drafting) {
      without = pipelined;
      EXPECT_GT(without, 40u);
    } else {
      EXPECT_EQ(drafter.drafted_, 0) << "every plan was declined";
      EXPECT_GE(pipelined + 4, without) << "a re-plan every 32 ticks, not one at each end";
    }
    scheduler_.reset();
  }
}

TEST_F(SpecSchedulerTest, HostWorkThePipelineHidesCountsAgainstVerifyingTicks) {
  // A decode costs 10 ms plus 0.2 ms a row; the compute loop spends 9 ms on host work after each
  // tick (events, delivery). A pipelined plain tick hides that work behind the device, a verifying
  // tick cannot: by their decode times alone drafts agreeing half the time look better, by the
  // loop's time they are worse. Speculation must then cost (nearly) nothing.
  auto device_us = [](std::span<const BatchEntry> b) { return 10000 + 200 * static_cast<long>(b.size()); };
  const double plain_ms = two_streams_on_async_device(device_us, 9000, nullptr);
  FakeDrafter drafter([](Token t) { return t % 2 == 0; });
  const double ms = two_streams_on_async_device(device_us, 9000, &drafter);
  EXPECT_GT(drafter.calls_, 0);
  EXPECT_LT(ms, 1.03 * plain_ms) << drafter.calls_ << " draft calls";
}

TEST_F(SpecSchedulerTest, ANewShapesCostFallsOnTheFirstVerifyingTickOfARunAlone) {
  // A device that captures a graph whenever decodes go from plain to verifying or back, here at
  // the cost of a hundred plain ticks: 1 s, against 10 ms plus 0.2 ms a row. Drafts always agree,
  // so steady verifying ticks pay many times over; a run's first verifying tick, and so a lone
  // probe, loses. The guard must judge runs by their steady ticks.
  bool last_verified = false;
  auto device_us = [&last_verified](std::span<const BatchEntry> b) {
    const bool verifying = b.size() > 2;  // two sessions: more rows are drafts
    const long capture = verifying != std::exchange(last_verified, verifying) ? 1000000 : 0;
    return 10000 + capture + 200 * static_cast<long>(b.size());
  };
  const double plain_ms = two_streams_on_async_device(device_us, 2000, nullptr);
  FakeDrafter drafter([](Token) { return true; });
  last_verified = false;
  const double ms = two_streams_on_async_device(device_us, 2000, &drafter);
  EXPECT_LT(ms, 0.6 * plain_ms) << drafter.calls_ << " draft calls, " << metrics_.spec_accepted_total.load() << " accepted";
}

TEST_F(SpecSchedulerTest, VerifyingTicksKeepOneShapeWhileTheGuardMeasuresThem) {
  // Costs as an H100 showed them (docs/BENCHMARKS.md, session 25): a decode of a shape (rows) new
  // to the last ones runs without a graph (+3 ms), the second in a row is captured (+7 ms), from
  // the third it replays (3 ms plus 0.1 ms a row); going back to the plain shape costs one tick
  // (+4 ms). Drafts agree three times in four, so the acceptance, and with it the plan's rows,
  // move tick by tick: verifying at whatever rows the plan picks, no shape repeats and every tick
  // pays a graph. Measured at one pinned shape, verifying pays.
  std::size_t last_rows = 0;
  int run = 0;
  auto device_us = [&](std::span<const BatchEntry> b) {
    run = b.size() == last_rows ? run + 1 : 1;
    last_rows = b.size();
    const long graph = b.size() == 2 ? (run == 1 ? 4000 : 0) : run == 1 ? 3000 : run == 2 ? 7000 : 0;
    return 3000 + graph + 100 * static_cast<long>(b.size());
  };
  const double plain_ms = two_streams_on_async_device(device_us, 200, nullptr);
  FakeDrafter drafter([](Token t) { return t % 4 != 0; });
  last_rows = 0, run = 0;
  const double ms = two_streams_on_async_device(device_us, 200, &drafter);
  EXPECT_LT(ms, 0.75 * plain_ms) << drafter.calls_ << " draft calls, " << metrics_.spec_accepted_total.load() << " accepted";
}

// Verifying ticks by their rows: how many, the commonest shape's count, and all of them as text.
struct ShapeTally {
  int verifying = 0, most = 0;
  std::string seen;
};
ShapeTally tally(const std::map<std::size_t, int>& shapes) {
  ShapeTally t;
  for (const auto& [rows, n] : shapes) {
    t.verifying += n, t.most = std::max(t.most, n);
    t.seen += " " + std::to_string(rows) + ":" + std::to_string(n);
  }
  return t;
}

TEST_F(SpecSchedulerTest, ADraftModelsVerifyingTicksKeepOneShapeWhateverItsAcceptance) {
  // The device of the test above, and a draft model right about 6 times in 10 (pseudo-random by
  // token): the acceptance, and with it the rows worth drafting, changes with each verification.
  // The plan fills to the guard's arm (its leading or pinned one) with pads, never drafted, so
  // that verifying ticks keep one shape and their graph replays; pads count against no acceptance.
  // (Without the fill, fewer than half the verifying ticks had the commonest shape.)
  std::size_t last_rows = 0;
  int run = 0;
  std::map<std::size_t, int> shapes;  // verifying ticks by rows
  auto device_us = [&](std::span<const BatchEntry> b) {
    run = b.size() == last_rows ? run + 1 : 1;
    last_rows = b.size();
    if (b.size() > 2) shapes[b.size()]++;
    const long graph = b.size() == 2 ? (run == 1 ? 4000 : 0) : run == 1 ? 3000 : run == 2 ? 7000 : 0;
    return 3000 + graph + 100 * static_cast<long>(b.size());
  };
  FakeDrafter drafter([](Token t) { return (t * 7919) % 10 < 6; });
  two_streams_on_async_device(device_us, 200, &drafter);
  const ShapeTally t = tally(shapes);
  ASSERT_GT(t.verifying, 100);
  EXPECT_GT(t.most, 0.8 * t.verifying) << "verifying ticks by rows:" << t.seen;
  EXPECT_GT(metrics_.spec_accepted_total.load(), 0u);
  EXPECT_LT(metrics_.spec_accepted_total.load(), metrics_.spec_drafted_total.load());
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
