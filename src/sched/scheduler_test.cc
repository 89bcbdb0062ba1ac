// Batch building, logits-row mapping and scheduling against a fake decoder whose "model" predicts
// token + 1 (like the oracle model), and which checks every call the scheduler makes.
#include "sched/scheduler.h"

#include <gtest/gtest.h>


#include "sched/scheduler_test_support.h"

namespace uma {
namespace {

using testing_support::SchedulerTest;

TEST(BatchBuilder, MapsEveryLogitsRowToItsSession) {
  Session a, b, c;
  a.seq = 0; a.state = SessionState::kDecode; a.tokens = {1, 2, 3, 4, 5, 6, 7, 50}; a.n_past = 7;
  b.seq = 1; b.state = SessionState::kPrefill; b.tokens = {1, 2, 3, 4, 5}; b.n_prefilled = 2;
  c.seq = 2; c.state = SessionState::kPrefill; c.tokens = {1, 9, 9, 9, 9, 9, 9}; c.n_prefilled = 0;
  Session* order[] = {&a, &b, &c};
  TickPlan plan;
  plan.decode = {0};
  plan.prefill = {{1, 3}, {2, 4}};  // b completes its prompt, c does not
  BuiltBatch out;
  build_batch(plan, order, out);
  ASSERT_EQ(out.entries.size(), 8u);
  EXPECT_EQ(out.entries[0].token, 50);
  EXPECT_EQ(out.entries[0].pos, 7);
  EXPECT_TRUE(out.entries[0].logits);
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(out.entries[1 + k].token, b.tokens[2 + k]);
    EXPECT_EQ(out.entries[1 + k].pos, 2 + k);
    EXPECT_EQ(out.entries[1 + k].seq, 1);
    EXPECT_EQ(out.entries[1 + k].logits, k == 2);
  }
  for (int k = 0; k < 4; ++k) EXPECT_FALSE(out.entries[4 + k].logits) << "an unfinished chunk needs no logits";
  ASSERT_EQ(out.rows.size(), 2u);
  EXPECT_EQ(out.rows[0].session, &a);
  EXPECT_EQ(out.rows[0].batch_index, 0);
  EXPECT_EQ(out.rows[1].session, &b);
  EXPECT_EQ(out.rows[1].batch_index, 3);
}

TEST_F(SchedulerTest, ConcurrentRequestsEachGetTheirOwnContinuation) {
  make(/*n_batch=*/64, /*n_ctx=*/1024, /*n_seq=*/8);
  submit(1, "abc", 5);
  submit(2, "hello", 7);
  submit(3, "z", 3);
  run_until_idle();
  EXPECT_EQ(out_[1].text, expected(100 + 'c', 5));
  EXPECT_EQ(out_[2].text, expected(100 + 'o', 7));
  EXPECT_EQ(out_[3].text, expected(100 + 'z', 3));
  for (RequestId id : {1, 2, 3}) {
    EXPECT_EQ(out_[id].done, 1);
    EXPECT_EQ(out_[id].reason, FinishReason::kLength);
  }
  EXPECT_EQ(out_[2].completion_tokens, 7);
  EXPECT_EQ(decoder_->total_kv(), 0) << "every sequence freed";
  EXPECT_EQ(decoder_->ended_, 3);
  EXPECT_EQ(metrics_.tokens_generated_total.load(), 15u);
  EXPECT_EQ(metrics_.batch_calls_total.load(), static_cast<std::uint64_t>(decoder_->decodes_));
}

TEST_F(SchedulerTest, LongPromptIsChunkedWhileStreamsKeepDecoding) {
  SchedulerConfig cfg;
  cfg.start_budget = 16;
  cfg.min_prefill = 16;
  make(/*n_batch=*/16, 4096, 4, cfg);
  submit(1, "s", 400);
  scheduler_->tick(events_);  // prefill of request 1 completes; it is now decoding
  collect();
  submit(2, std::string(300, 'x'), 2);
  int ticks_while_prefilling = 0;
  while (out_[2].text.empty()) {
    const size_t before = out_[1].text.size();
    scheduler_->tick(events_);
    collect();
    EXPECT_GT(out_[1].text.size(), before) << "the running stream got no token in tick " << ticks_while_prefilling;
    ++ticks_while_prefilling;
  }
  EXPECT_GE(ticks_while_prefilling, 300 / 16);
  EXPECT_LE(decoder_->max_batch_, 16u);
  run_until_idle();
  EXPECT_EQ(out_[2].text, expected(100 + 'x', 2));
  EXPECT_EQ(out_[1].text, expected(100 + 's', 400));
}

TEST_F(SchedulerTest, CancelFreesKvAndSilencesTheRequest) {
  make(64, 1024, 4);
  submit(1, "abc", 100);
  submit(2, "def", 10);
  for (int i = 0; i < 3; ++i) scheduler_->tick(events_);
  collect();
  EXPECT_GT(decoder_->kv_tokens(0) + decoder_->kv_tokens(1), 0);
  scheduler_->cancel(1, events_);
  scheduler_->cancel(1, events_);  // idempotent
  collect();
  EXPECT_EQ(out_[1].done, 1);
  EXPECT_EQ(out_[1].reason, FinishReason::kCancelled);
  EXPECT_EQ(decoder_->kv_tokens(0) + decoder_->kv_tokens(1), decoder_->total_kv()) << "sanity";
  run_until_idle();
  EXPECT_EQ(out_[1].errors, 0);
  EXPECT_EQ(out_[2].text, expected(100 + 'f', 10));
  EXPECT_EQ(decoder_->total_kv(), 0);
  EXPECT_EQ(metrics_.requests_cancelled_total.load(), 1u);
}

TEST_F(SchedulerTest, RequestsWaitForASequenceInsteadOfFailing) {
  make(64, /*n_ctx=*/64, /*n_seq=*/1);
  submit(1, "aaaa", 20);
  submit(2, "bbbb", 20);  // no sequence id free: waits
  scheduler_->publish_metrics();
  EXPECT_EQ(metrics_.queued_sessions.load(), 1);
  run_until_idle();
  EXPECT_EQ(out_[1].text, expected(100 + 'a', 20));
  EXPECT_EQ(out_[2].text, expected(100 + 'b', 20));
  EXPECT_EQ(decoder_->total_kv(), 0);
}

TEST_F(SchedulerTest, AdmissionRejectsAtOnceWhenTheWaitingQueueIsFull) {
  SchedulerConfig cfg;
  cfg.max_queue = 1;
  make(64, /*n_ctx=*/64, /*n_seq=*/1, cfg);
  submit(1, "aaaa", 20);  // runs
  submit(2, "bbbb", 20);  // waits: the queue now holds 1
  submit(3, "cccc", 20);  // over the queue cap
  EXPECT_EQ(out_[3].error, ErrorCode::kOverloaded);
  EXPECT_EQ(out_[2].errors, 0);
  run_until_idle();
  EXPECT_EQ(out_[1].text, expected(100 + 'a', 20));
  EXPECT_EQ(out_[2].text, expected(100 + 'b', 20));
  EXPECT_EQ(metrics_.errors(ErrorCode::kOverloaded), 1u);
}

TEST_F(SchedulerTest, RequestsWaitingPastTheAgeLimitAreRejected) {
  SchedulerConfig cfg;
  cfg.max_queue_ms = 5;
  make(64, /*n_ctx=*/64, /*n_seq=*/1, cfg);
  submit(1, "aaaa", 20);
  submit(2, "bbbb", 20);  // waits for room
  clock_.advance(std::chrono::milliseconds(20));
  scheduler_->tick(events_);
  collect();
  EXPECT_EQ(out_[2].error, ErrorCode::kOverloaded);
  run_until_idle();
  EXPECT_EQ(out_[1].text, expected(100 + 'a', 20)) << "the running request is unaffected";
  EXPECT_EQ(decoder_->total_kv(), 0);
}

TEST_F(SchedulerTest, PromptBeyondContextIsATypedError) {
  make(64, 16, 2);
  submit(1, std::string(20, 'a'), 4);
  EXPECT_EQ(out_[1].errors, 1);
  EXPECT_EQ(out_[1].error, ErrorCode::kContextExceeded);
  EXPECT_EQ(out_[1].param, "prompt");
  submit(2, std::string(15, 'a'), 4);  // 16 tokens with the BOS: no room for one generated token
  EXPECT_EQ(out_[2].error, ErrorCode::kContextExceeded);
  submit(3, "ab", 0);  // no max_tokens: generation runs to the context's end
  run_until_idle();
  EXPECT_EQ(out_[3].completion_tokens, 16 - 3);
  EXPECT_EQ(out_[3].reason, FinishReason::kLength);
}

TEST_F(SchedulerTest, MaxTokensComesFromTheRequestElseTheDefaultAndACapLowersIt) {
  SchedulerConfig cfg;
  cfg.default_max_tokens = 5;
  cfg.max_tokens_cap = 9;
  make(64, 1024, 4, cfg);
  submit(1, "a", 0);   // the default
  submit(2, "b", 7);   // its own
  submit(3, "c", 50);  // over the cap: lowered to it, not refused
  run_until_idle();
  EXPECT_EQ(out_[1].text, expected(100 + 'a', 5));
  EXPECT_EQ(out_[2].text, expected(100 + 'b', 7));
  EXPECT_EQ(out_[3].text, expected(100 + 'c', 9));
  EXPECT_EQ(out_[3].reason, FinishReason::kLength);
  EXPECT_EQ(out_[3].errors, 0);
}

TEST_F(SchedulerTest, CapBelowTheContextMakesALargeMaxTokensFit) {
  SchedulerConfig cfg;
  cfg.max_tokens_cap = 8;
  make(64, 32, 2, cfg);
  submit(1, "abc", 4000);  // 4 + 4000 would not fit, 4 + 8 does
  run_until_idle();
  EXPECT_EQ(out_[1].errors, 0);
  EXPECT_EQ(out_[1].completion_tokens, 8);
}

TEST_F(SchedulerTest, EndOfGenerationStopsWithoutEmittingIt) {
  make(64, 1024, 2);
  decoder_->eos_after_ = 100 + 'a' + 3;
  submit(1, "a", 50);
  run_until_idle();
  EXPECT_EQ(out_[1].text, expected(100 + 'a', 2));
  EXPECT_EQ(out_[1].reason, FinishReason::kStop);
  EXPECT_EQ(out_[1].completion_tokens, 2);
}

TEST_F(SchedulerTest, StopStringsMatchAcrossTokensAndAreNeverEmitted) {
  make(64, 1024, 2);
  // 'a' is token 197: the stream is <198><199><200>...; "8><19" spans the first two tokens.
  submit(1, "a", 50, {"8><19"});
  submit(2, "a", 3, {"zzz"});  // never matches: held-back text is released at the end
  run_until_idle();
  EXPECT_EQ(out_[1].text, "<19");
  EXPECT_EQ(out_[1].reason, FinishReason::kStop);
  EXPECT_EQ(out_[1].completion_tokens, 2);
  EXPECT_EQ(out_[2].text, expected(197, 3));
  EXPECT_EQ(out_[2].reason, FinishReason::kLength);
  EXPECT_EQ(decoder_->total_kv(), 0);
}

TEST_F(SchedulerTest, MultiByteCharactersSplitAcrossTokensAreNeverSplitInEvents) {
  make(64, 1024, 2);
  decoder_->pieces_ = {{198, "\xE2"}, {199, "\x82"}, {200, "\xAC"}, {201, "\xF0\x9F"}, {202, "\x98\x80"}, {203, "\xC3"}};
  submit(1, "a", 6);  // ends on a lone lead byte: it becomes U+FFFD
  run_until_idle();
  EXPECT_EQ(out_[1].text, "\xE2\x82\xAC\xF0\x9F\x98\x80\xEF\xBF\xBD");
  ASSERT_EQ(out_[1].chunks.size(), 3u);
  EXPECT_EQ(out_[1].chunks[0], "\xE2\x82\xAC");
  EXPECT_EQ(out_[1].chunks[1], "\xF0\x9F\x98\x80");
  EXPECT_EQ(out_[1].chunks[2], "\xEF\xBF\xBD");
}

TEST_F(SchedulerTest, ExplicitMaxTokensBeyondTheContextIsAnError) {
  make(64, 32, 2);
  submit(1, "abc", 29);
  EXPECT_EQ(out_[1].error, ErrorCode::kContextExceeded);
  EXPECT_EQ(out_[1].param, "max_tokens") << "OpenAI names the field at fault";
  submit(2, "abc", 28);  // 4 + 28 = 32 fits exactly
  run_until_idle();
  EXPECT_EQ(out_[2].completion_tokens, 28);
}

TEST_F(SchedulerTest, AStartTheDecoderRefusesEndsThatRequestWithAnErrorAndOthersRun) {
  make(64, 256, 2);
  decoder_->fail_start_ = true;
  submit(1, "abc", 4);
  EXPECT_EQ(out_[1].errors, 1) << "an error event, not a request left queued";
  EXPECT_EQ(out_[1].error, ErrorCode::kInvalidArgument);
  EXPECT_EQ(metrics_.errors(ErrorCode::kInvalidArgument), 1u);
  submit(2, "abd", 4);
  run_until_idle();
  EXPECT_EQ(out_[2].text, expected(100 + 'd', 4));
  EXPECT_FALSE(scheduler_->has_work());
  EXPECT_EQ(decoder_->total_kv(), 0);
}

TEST_F(SchedulerTest, DecodeFailureFailsTheBatchAndFreesKv) {
  make(64, 1024, 4);
  submit(1, "abc", 10);
  submit(2, "de", 10);
  decoder_->fail_next_ = true;
  scheduler_->tick(events_);
  collect();
  EXPECT_EQ(out_[1].error, ErrorCode::kDecodeFailed);
  EXPECT_EQ(out_[2].error, ErrorCode::kDecodeFailed);
  EXPECT_FALSE(scheduler_->has_work());
  EXPECT_EQ(decoder_->total_kv(), 0);
  submit(3, "x", 2);  // the scheduler keeps serving
  run_until_idle();
  EXPECT_EQ(out_[3].text, expected(100 + 'x', 2));
}

TEST_F(SchedulerTest, ShutdownFailsEveryOpenRequest) {
  make(64, 40, /*n_seq=*/1);
  submit(1, "aaaa", 20);
  submit(2, "bbbb", 20);  // queued
  scheduler_->tick(events_);
  scheduler_->fail_all(Status(ErrorCode::kShuttingDown, "bye"), events_);
  collect();
  EXPECT_EQ(out_[1].error, ErrorCode::kShuttingDown);
  EXPECT_EQ(out_[2].error, ErrorCode::kShuttingDown);
  EXPECT_EQ(decoder_->total_kv(), 0);
}

// The calibration: the tick budget's cost fit learns a tick's
// fixed cost and a prompt token's cost from timed chunks; the scratch sequence's id and KV go back.
TEST_F(SchedulerTest, CalibrationFitsThePrefillCostAndLeavesNothingBehind) {
  make(256, 4096, 2);
  decoder_->on_decode_ = [this](std::span<const BatchEntry> b) {
    clock_.advance(std::chrono::microseconds(3000 + 50 * static_cast<long>(b.size())));  // 3 ms + 0.05 ms a token
  };
  EXPECT_EQ(metrics_.prefill_ms_per_token.load(), 0.0);
  ASSERT_TRUE(scheduler_->calibrate(1e9).ok());
  EXPECT_EQ(decoder_->decodes_, 9) << "2 chunks, each followed by a one-token decode step, a fill, then 4 at depth";
  // 3 ms fixed: 16 tokens cost 0.24 ms each, 256 tokens 0.062; the first within 1.3x of that is 128.
  EXPECT_EQ(scheduler_->prefill_knee(), 128);
  EXPECT_NEAR(metrics_.prefill_fixed_ms.load(), 3.0, 0.05);
  // The tick cost model is warm from them (no shape from the fake: it counts tokens).
  ASSERT_TRUE(scheduler_->cost_model().warm());
  EXPECT_NEAR(scheduler_->cost_model().predict_ms({100, 0}), 8.0, 0.1);
  EXPECT_NEAR(scheduler_->cost_model().predict_ms({1, 0}), 3.05, 0.05);
  EXPECT_NEAR(metrics_.prefill_ms_per_token.load(), 0.05, 0.001);
  EXPECT_EQ(decoder_->total_kv(), 0);
  // Both sequence ids are free again: two requests run at once, exactly.
  submit(1, "ab", 3);
  submit(2, "cd", 3);
  scheduler_->tick(events_);
  EXPECT_EQ(decoder_->last_.size(), 6u) << "both prompts in the first tick";
  run_until_idle();
  EXPECT_EQ(out_[1].text, expected(100 + 'b', 3));
  EXPECT_EQ(out_[2].text, expected(100 + 'd', 3));
  EXPECT_EQ(decoder_->total_kv(), 0);
}

TEST_F(SchedulerTest, CalibrationStopsAtItsTimeBoundAndOnlyBeforeTheFirstRequest) {
  make(256, 4096, 2);
  decoder_->on_decode_ = [this](std::span<const BatchEntry>) { clock_.advance(std::chrono::milliseconds(100)); };
  ASSERT_TRUE(scheduler_->calibrate(250).ok());
  EXPECT_EQ(decoder_->decodes_, 4) << "a warm-up chunk and step, then measured ones until 250 ms were spent in all";
  EXPECT_GT(metrics_.prefill_ms_per_token.load(), 0.0);
  submit(1, "ab", 3);
  EXPECT_EQ(scheduler_->calibrate(150).code(), ErrorCode::kInternal);
  EXPECT_EQ(decoder_->decodes_, 4);
  run_until_idle();
  EXPECT_EQ(out_[1].text, expected(100 + 'b', 3));
}

// Idle, the compute thread calibrates a chunk a step; the first request ends it at once, keeping
// what was measured, and the scratch sequence's KV and id go back before the request starts.
TEST_F(SchedulerTest, CalibrationGoesAChunkAStepAndTheFirstRequestEndsItWithWhatItMeasuredKept) {
  make(256, 4096, 1);
  decoder_->on_decode_ = [this](std::span<const BatchEntry> b) {
    clock_.advance(std::chrono::microseconds(3000 + 50 * static_cast<long>(b.size())));
  };
  ASSERT_TRUE(scheduler_->begin_calibration(1e9).ok());
  EXPECT_TRUE(scheduler_->calibrating());
  EXPECT_FALSE(scheduler_->has_work()) << "calibrating is not serving: nothing waits on it";
  EXPECT_EQ(scheduler_->begin_calibration(1e9).code(), ErrorCode::kInternal) << "one at a time";
  for (int step = 0; step < 3; ++step) ASSERT_TRUE(scheduler_->calibrate_step().ok());
  EXPECT_EQ(decoder_->decodes_, 5) << "warm-up and measured chunk-and-step pairs, then the fill";
  EXPECT_GT(decoder_->total_kv(), 0) << "the fill is held between steps";
  EXPECT_TRUE(scheduler_->calibrating());
  submit(1, "ab", 3);  // the one sequence id is the calibration's until the request ends it
  EXPECT_FALSE(scheduler_->calibrating());
  EXPECT_EQ(decoder_->total_kv(), 0);
  EXPECT_GT(metrics_.prefill_ms_per_token.load(), 0.0) << "the measured pair is kept";
  EXPECT_EQ(scheduler_->prefill_knee(), 0) << "no floor from a partial sweep";
  EXPECT_TRUE(scheduler_->calibrate_step().ok()) << "a step after the end does nothing";
  EXPECT_EQ(decoder_->decodes_, 5);
  run_until_idle();
  EXPECT_EQ(out_[1].text, expected(100 + 'b', 3));
  EXPECT_EQ(decoder_->total_kv(), 0);
}

TEST_F(SchedulerTest, ACalibrationDecodeThatFailsGivesItsSequenceBack) {
  make(256, 4096, 1);
  decoder_->fail_next_ = true;
  EXPECT_EQ(scheduler_->calibrate(1e9).code(), ErrorCode::kDecodeFailed);
  EXPECT_EQ(decoder_->total_kv(), 0);
  submit(1, "ab", 3);  // the one sequence id is free
  run_until_idle();
  EXPECT_EQ(out_[1].text, expected(100 + 'b', 3));
}

}  // namespace
}  // namespace uma
