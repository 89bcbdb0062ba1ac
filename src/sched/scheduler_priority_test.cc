// Request classes, preemption and per-tenant caps, against the fake decoder (next token = last + 1,
// so any lost, repeated or misplaced token shows in the text).
#include <gtest/gtest.h>


#include "sched/scheduler_test_support.h"

namespace uma {
namespace {

using testing_support::SchedulerTest;

// One sequence id: a running background request leaves none for an interactive one.
constexpr std::int32_t kOneSeq = 1;
// n_ctx 60: with --preempt off, a background request is granted 5 + 40 cells up front, leaving
// 15, too few for an interactive 5 + 20.
constexpr std::int32_t kSmallCtx = 60;

TEST_F(SchedulerTest, InteractiveRequestPausesBackgroundWhichResumesExactlyWithSavedKv) {
  make(64, 1024, kOneSeq);
  submit_background(1, "bbbb", 40);
  for (int i = 0; i < 6; ++i) scheduler_->tick(events_);  // prefill + 5 tokens
  collect();
  const int samplers_before = decoder_->samplers_made_;
  submit(2, "iiii", 20);
  scheduler_->publish_metrics();
  EXPECT_EQ(metrics_.preempted_saved_total.load(), 1u) << "copying 10 tokens beats recomputing them";
  EXPECT_EQ(metrics_.preempted_priority_total.load(), 1u);
  EXPECT_EQ(metrics_.preempted_kv_full_total.load(), 0u);
  EXPECT_EQ(metrics_.sessions_by_state[static_cast<std::size_t>(GaugeState::kPaused)].load(), 1);
  EXPECT_GT(metrics_.parked_bytes.load(), 0);
  // The interactive request runs to its end before the background one comes back.
  while (out_[2].done == 0) {
    scheduler_->tick(events_);
    collect();
  }
  EXPECT_EQ(out_[2].text, expected(100 + 'i', 20));
  run_until_idle();
  EXPECT_EQ(out_[1].text, expected(100 + 'b', 40)) << "paused and resumed as if never paused";
  EXPECT_EQ(out_[1].completion_tokens, 40);
  EXPECT_EQ(metrics_.resumed_total.load(), 1u);
  EXPECT_EQ(decoder_->samplers_made_, samplers_before + 1) << "the paused sampler came back, no new one";
  EXPECT_EQ(decoder_->total_kv(), 0);
  scheduler_->publish_metrics();
  EXPECT_EQ(metrics_.parked_bytes.load(), 0);
  EXPECT_EQ(metrics_.paused_ms.snapshot().count, 1u) << "one pause, timed";
}

TEST_F(SchedulerTest, BackgroundPausedWithDroppedKvRecomputesAndContinuesExactly) {
  SchedulerConfig cfg;
  cfg.park = ParkPreference::kRecompute;
  make(/*n_batch=*/8, 1024, kOneSeq, cfg);  // recompute of 4 + ~10 tokens takes several chunks
  submit_background(1, "bbbb", 40);
  for (int i = 0; i < 12; ++i) scheduler_->tick(events_);
  collect();
  submit(2, "iiii", 20);
  EXPECT_EQ(metrics_.preempted_recomputed_total.load(), 1u);
  run_until_idle();
  EXPECT_EQ(out_[2].text, expected(100 + 'i', 20));
  EXPECT_EQ(out_[1].text, expected(100 + 'b', 40));
  EXPECT_EQ(metrics_.resumed_total.load(), 1u);
  EXPECT_EQ(decoder_->total_kv(), 0);
}

TEST_F(SchedulerTest, SavedKvThatDoesNotFitBackIsRecomputed) {
  make(64, 1024, kOneSeq);
  decoder_->fail_restore_ = true;
  submit_background(1, "bbbb", 40);
  for (int i = 0; i < 6; ++i) scheduler_->tick(events_);
  collect();
  submit(2, "iiii", 20);
  run_until_idle();
  EXPECT_EQ(out_[1].text, expected(100 + 'b', 40));
  EXPECT_EQ(out_[2].text, expected(100 + 'i', 20));
  EXPECT_EQ(metrics_.kv_restore_fallbacks_total.load(), 1u);
}

TEST_F(SchedulerTest, BackgroundPausedMidPrefillResumesItsPrefill) {
  make(/*n_batch=*/4, /*n_ctx=*/120, /*n_seq=*/2);
  submit(9, "d", 60);  // an interactive stream, so prefill gets 3 tokens a tick
  scheduler_->tick(events_);
  submit_background(1, std::string(30, 'b'), 10);  // takes the second sequence
  scheduler_->tick(events_);
  scheduler_->tick(events_);
  collect();
  scheduler_->publish_metrics();
  EXPECT_EQ(metrics_.sessions_by_state[static_cast<std::size_t>(GaugeState::kPrefill)].load(), 1);
  submit(2, "ii", 20);  // no sequence id left
  EXPECT_EQ(metrics_.preempted_saved_total.load() + metrics_.preempted_recomputed_total.load(), 1u);
  run_until_idle();
  EXPECT_EQ(out_[9].text, expected(100 + 'd', 60));
  EXPECT_EQ(out_[2].text, expected(100 + 'i', 20));
  EXPECT_EQ(out_[1].text, expected(100 + 'b', 10));
}

TEST_F(SchedulerTest, InteractiveRequestsAreNeverPausedForOtherRequests) {
  make(64, 1024, kOneSeq);
  submit(1, "aaaa", 40);
  scheduler_->tick(events_);
  submit(2, "iiii", 20);  // no sequence, and the holder is interactive: it waits its turn
  scheduler_->publish_metrics();
  EXPECT_EQ(metrics_.sessions_by_state[static_cast<std::size_t>(GaugeState::kQueued)].load(), 1);
  EXPECT_EQ(decoder_->parks_, 0);
  run_until_idle();
  EXPECT_EQ(out_[1].text, expected(100 + 'a', 40));
  EXPECT_EQ(out_[2].text, expected(100 + 'i', 20));
}

TEST_F(SchedulerTest, PreemptionOffMakesInteractiveWait) {
  SchedulerConfig cfg;
  cfg.preemption = false;
  make(64, kSmallCtx, 4, cfg);
  submit_background(1, "bbbb", 40);
  scheduler_->tick(events_);
  submit(2, "iiii", 20);
  EXPECT_EQ(decoder_->parks_, 0);
  run_until_idle();
  EXPECT_EQ(out_[2].text, expected(100 + 'i', 20));
}

TEST_F(SchedulerTest, InteractiveJumpsAheadOfWaitingBackgroundWork) {
  make(64, 1024, kOneSeq);
  submit(1, "aaaa", 20);             // runs
  submit_background(2, "bbbb", 20);  // waits
  submit(3, "cccc", 20);             // waits too, but goes first
  const std::vector<RequestId> finish_order = run_recording_finish_order();
  EXPECT_EQ(finish_order, (std::vector<RequestId>{1, 3, 2}));
}

TEST_F(SchedulerTest, InteractivePrefillGoesBeforeBackgroundPrefill) {
  SchedulerConfig cfg;
  cfg.start_budget = 16;
  cfg.min_prefill = 16;
  make(/*n_batch=*/32, 4096, 4, cfg);
  submit(9, "d", 100);  // a decoding stream, so prefill gets the budget, not the whole batch
  scheduler_->tick(events_);
  submit_background(1, std::string(200, 'b'), 4);
  submit(2, std::string(40, 'i'), 4);
  scheduler_->tick(events_);
  collect();
  ASSERT_EQ(decoder_->last_.size(), 17u);  // 1 decode + 16 prefill
  for (std::size_t k = 1; k < decoder_->last_.size(); ++k) {
    EXPECT_EQ(decoder_->last_[k].token, k == 1 ? 1 : 100 + 'i') << "entry " << k << " is not the interactive prompt";
  }
}

TEST_F(SchedulerTest, BackgroundPastItsWaitBoundIsServedLikeInteractive) {
  SchedulerConfig cfg;
  cfg.start_budget = 16;
  cfg.min_prefill = 16;
  cfg.background_max_wait_ms = 5;
  make(32, 4096, 4, cfg);
  submit(9, "d", 100);
  scheduler_->tick(events_);
  submit_background(1, std::string(20, 'b'), 4);
  clock_.advance(std::chrono::milliseconds(10));  // its TTFT bound has passed
  Request late;  // an interactive prompt already past its own (1 ms) TTFT target
  late.id = 2;
  late.prompt = std::string(40, 'i');
  late.max_tokens = 4;
  late.slo_ttft_ms = 1;
  submit(std::move(late));
  clock_.advance(std::chrono::milliseconds(2));
  scheduler_->tick(events_);
  collect();
  ASSERT_EQ(decoder_->last_.size(), 17u);
  // Both are urgent and late: the shorter goes first. Without its bound, the background prompt
  // would rank below every interactive one.
  EXPECT_EQ(decoder_->last_[2].token, 100 + 'b') << "the starving background prompt went first";
}

TEST_F(SchedulerTest, DecodeWithoutKvCellsPausesOneSessionAndNobodySeesAnError) {
  make(64, 1024, 4);
  submit(1, "abc", 12);
  submit_background(2, "de", 12);
  scheduler_->tick(events_);
  decoder_->kv_full_next_ = true;
  scheduler_->tick(events_);
  collect();
  EXPECT_EQ(metrics_.kv_exhausted_total.load(), 1u);
  run_until_idle();
  EXPECT_EQ(out_[1].errors + out_[2].errors, 0);
  EXPECT_EQ(out_[1].text, expected(100 + 'c', 12));
  EXPECT_EQ(out_[2].text, expected(100 + 'e', 12));
  EXPECT_EQ(metrics_.resumed_total.load(), 1u);
  EXPECT_EQ(decoder_->total_kv(), 0);
}

TEST_F(SchedulerTest, CancelWhilePausedFreesTheParkedState) {
  make(64, 1024, kOneSeq);
  submit_background(1, "bbbb", 40);
  for (int i = 0; i < 4; ++i) scheduler_->tick(events_);
  submit(2, "iiii", 20);
  scheduler_->cancel(1, events_);
  collect();
  EXPECT_EQ(out_[1].reason, FinishReason::kCancelled);
  scheduler_->publish_metrics();
  EXPECT_EQ(metrics_.parked_bytes.load(), 0);
  run_until_idle();
  EXPECT_EQ(out_[2].text, expected(100 + 'i', 20));
  EXPECT_EQ(metrics_.resumed_total.load(), 0u);
  EXPECT_EQ(metrics_.paused_ms.snapshot().count, 1u) << "a pause ended by cancellation is timed too";
}

TEST_F(SchedulerTest, BackgroundPausedOftenIsNoLongerPausedForInteractiveWork) {
  SchedulerConfig cfg;
  cfg.preemptions_before_protected = 3;
  make(64, 1024, kOneSeq, cfg);
  submit_background(1, "bbbb", 200);
  scheduler_->tick(events_);
  for (RequestId id = 10; id < 13; ++id) {
    submit(id, "i", 2);  // pauses the background request, runs, ends; the background one resumes
    while (out_[id].done == 0) {
      scheduler_->tick(events_);
      collect();
    }
    scheduler_->tick(events_);
  }
  EXPECT_EQ(metrics_.preempted_priority_total.load(), 3u);
  submit(13, "i", 2);  // the fourth: the background request has been paused enough
  scheduler_->publish_metrics();
  EXPECT_EQ(metrics_.preempted_priority_total.load(), 3u) << "not paused a fourth time";
  EXPECT_EQ(metrics_.sessions_by_state[static_cast<std::size_t>(GaugeState::kQueued)].load(), 1);
  run_until_idle();
  EXPECT_EQ(out_[1].text, expected(100 + 'b', 200));
  EXPECT_EQ(out_[13].text, expected(100 + 'i', 2));
}

TEST_F(SchedulerTest, PerTenantCapRejectsTheExtraRequest) {
  SchedulerConfig cfg;
  cfg.tenant_max_requests = 2;
  make(64, 1024, 8, cfg);
  submit_background(1, "a", 5, "acme");
  submit_background(2, "b", 5, "acme");
  submit_background(3, "c", 5, "acme");
  submit_background(4, "d", 5, "other");
  submit_background(5, "e", 5);  // no tenant: no cap
  EXPECT_EQ(out_[3].error, ErrorCode::kOverloaded);
  EXPECT_EQ(metrics_.rejected(RejectReason::kTenantCap), 1u);
  run_until_idle();
  for (RequestId id : {1, 2, 4, 5}) EXPECT_EQ(out_[id].done, 1) << id;
  submit_background(6, "f", 5, "acme");  // the tenant's earlier requests are done
  run_until_idle();
  EXPECT_EQ(out_[6].done, 1);
}

}  // namespace
}  // namespace uma
