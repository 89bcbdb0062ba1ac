// KV granted as it is used, against the fake decoder (next token = last + 1, so a lost, repeated or
// misplaced token shows in the text; it holds n_ctx cells like llama.cpp's unified KV and fails a
// decode that does not fit). Requests start on their prompt's cells; when the running sessions
// outgrow the cache, the youngest is paused and resumes exactly when room returns.
#include <gtest/gtest.h>

#include "sched/scheduler_test_support.h"

namespace uma {
namespace {

using testing_support::SchedulerTest;

std::int64_t in_state(const ServerMetrics& m, GaugeState s) { return m.sessions_by_state[static_cast<std::size_t>(s)].load(); }

TEST_F(SchedulerTest, LargeMaxTokensDoesNotHoldKvItDoesNotUse) {
  make(64, /*n_ctx=*/512, /*n_seq=*/16);
  // Each asks for 500 tokens: 16 x 502 cells would be 16 contexts, but each starts on its 2 prompt cells.
  for (RequestId id = 1; id <= 16; ++id) submit(id, std::string(1, static_cast<char>('a' + id)), 500);
  scheduler_->publish_metrics();
  EXPECT_EQ(in_state(metrics_, GaugeState::kPrefill), 16);
  EXPECT_EQ(in_state(metrics_, GaugeState::kQueued), 0);
}

TEST_F(SchedulerTest, SixteenEarlyStoppingRequestsRunTogether) {
  make(64, /*n_ctx=*/1024, /*n_seq=*/16);
  // 'a'+k is token 197+k; the stream stops on the text of its 8th token.
  for (RequestId id = 0; id < 16; ++id) {
    const Token last = 100 + 'a' + static_cast<Token>(id);
    submit(id, std::string(1, static_cast<char>('a' + id)), 1000, {"<" + std::to_string(last + 8) + ">"});
  }
  scheduler_->tick(events_);  // prefill of all 16
  scheduler_->tick(events_);
  collect();
  scheduler_->publish_metrics();
  EXPECT_EQ(in_state(metrics_, GaugeState::kDecode), 16) << "all 16 decode at once";
  run_until_idle();
  for (RequestId id = 0; id < 16; ++id) {
    EXPECT_EQ(out_[id].text, expected(100 + 'a' + static_cast<Token>(id), 7)) << id;
    EXPECT_EQ(out_[id].reason, FinishReason::kStop);
  }
  EXPECT_EQ(metrics_.preempted_kv_full_total.load(), 0u);
}

TEST_F(SchedulerTest, ManyLongGenerationsFillTheKvAndAllFinishExactlyByPreemption) {
  make(64, /*n_ctx=*/256, /*n_seq=*/8);
  // 8 x (2 + 100) = 816 cells over time; 256 exist.
  for (RequestId id = 1; id <= 8; ++id) submit(id, std::string(1, static_cast<char>('a' + id)), 100);
  scheduler_->tick(events_);
  scheduler_->tick(events_);
  collect();
  scheduler_->publish_metrics();
  EXPECT_EQ(in_state(metrics_, GaugeState::kDecode), 8) << "all start: each needs only its prompt";
  const int ticks = run_until_idle(100000);
  EXPECT_LT(ticks, 100000) << "no livelock";
  for (RequestId id = 1; id <= 8; ++id) {
    EXPECT_EQ(out_[id].errors, 0) << id;
    EXPECT_EQ(out_[id].text, expected(100 + 'a' + static_cast<Token>(id), 100)) << id;
    EXPECT_EQ(out_[id].reason, FinishReason::kLength);
  }
  EXPECT_GT(metrics_.preempted_kv_full_total.load(), 0u);
  EXPECT_EQ(metrics_.resumed_total.load(), metrics_.preempted_kv_full_total.load()) << "every pause resumed";
  EXPECT_EQ(decoder_->kv_exhausted_, 0) << "the claims kept every decode within the cells";
  EXPECT_LE(decoder_->max_cells_used_, 256);
  EXPECT_EQ(decoder_->total_kv(), 0);
  EXPECT_EQ(metrics_.paused_ms.snapshot().count, metrics_.resumed_total.load());
  scheduler_->publish_metrics();
  EXPECT_EQ(metrics_.kv_cells_granted.load(), 0);
  EXPECT_EQ(metrics_.parked_bytes.load(), 0);
}

TEST_F(SchedulerTest, SavedOrRecomputedEveryPausedStreamContinuesExactly) {
  for (ParkPreference park : {ParkPreference::kSave, ParkPreference::kRecompute}) {
    SchedulerConfig cfg;
    cfg.park = park;
    make(/*n_batch=*/16, /*n_ctx=*/128, /*n_seq=*/6, cfg);
    out_.clear();
    for (RequestId id = 1; id <= 6; ++id) submit(id, std::string(static_cast<std::size_t>(id) * 3, static_cast<char>('a' + id)), 40);
    run_until_idle(100000);
    for (RequestId id = 1; id <= 6; ++id) {
      EXPECT_EQ(out_[id].text, expected(100 + 'a' + static_cast<Token>(id), 40)) << id;
    }
    EXPECT_GT(park == ParkPreference::kSave ? metrics_.preempted_saved_total.load() : metrics_.preempted_recomputed_total.load(), 0u);
    EXPECT_EQ(decoder_->kv_exhausted_, 0);
    EXPECT_EQ(decoder_->total_kv(), 0);
  }
}

TEST_F(SchedulerTest, APausedRequestThatCannotFitNextToARunningOneWaitsForItToFinish) {
  make(64, /*n_ctx=*/100, /*n_seq=*/4);
  submit(1, "a", 90);  // 92 cells at its end
  submit(2, "b", 90);  // so does this one: both cannot run to their ends together
  std::vector<RequestId> finish_order;
  int ticks = 0;
  bool both_ran = false;
  while (scheduler_->has_work() && ticks++ < 10000) {
    scheduler_->tick(events_);
    for (const Event& e : events_) {
      if (e.kind == Event::Kind::kDone) finish_order.push_back(e.request_id);
    }
    collect();
    scheduler_->publish_metrics();
    both_ran = both_ran || in_state(metrics_, GaugeState::kDecode) == 2;
  }
  EXPECT_TRUE(both_ran) << "they run together while they fit";
  EXPECT_EQ(finish_order, (std::vector<RequestId>{1, 2})) << "the older one is never paused for the younger";
  EXPECT_EQ(out_[1].text, expected(100 + 'a', 90));
  EXPECT_EQ(out_[2].text, expected(100 + 'b', 90));
  EXPECT_EQ(metrics_.preempted_kv_full_total.load(), 1u) << "paused once, resumed once: no thrashing";
  EXPECT_EQ(decoder_->kv_exhausted_, 0);
}

TEST_F(SchedulerTest, BackgroundIsPausedBeforeInteractiveStreamsWhenKvRunsOutEvenIfOlder) {
  make(64, /*n_ctx=*/120, /*n_seq=*/4);
  submit_background(3, "c", 50);
  submit(1, "a", 50);
  submit(2, "b", 50);
  const std::vector<RequestId> finish_order = run_recording_finish_order();
  EXPECT_EQ(finish_order.back(), 3u) << "the background request gave way";
  for (RequestId id = 1; id <= 3; ++id) EXPECT_EQ(out_[id].text, expected(100 + 'a' + static_cast<Token>(id) - 1, 50)) << id;
  EXPECT_GT(metrics_.preempted_kv_full_total.load(), 0u);
  EXPECT_EQ(decoder_->kv_exhausted_, 0);
}

TEST_F(SchedulerTest, TheOldestInteractiveStreamIsNeverPausedForKv) {
  make(64, /*n_ctx=*/120, /*n_seq=*/4);
  submit(1, "a", 100);
  submit(2, "b", 100);
  submit(3, "c", 100);
  const std::vector<RequestId> finish_order = run_recording_finish_order();
  EXPECT_EQ(finish_order, (std::vector<RequestId>{1, 2, 3})) << "first come, first finished";
  for (RequestId id = 1; id <= 3; ++id) EXPECT_EQ(out_[id].completion_tokens, 100) << id;
}

TEST_F(SchedulerTest, CancellingARequestPausedForKvFreesEverythingAndLetsTheOthersOn) {
  make(64, /*n_ctx=*/100, /*n_seq=*/4);
  submit(1, "a", 90);
  submit(2, "b", 90);
  while (metrics_.preempted_kv_full_total.load() == 0) {
    scheduler_->tick(events_);
    collect();
  }
  scheduler_->cancel(2, events_);
  collect();
  EXPECT_EQ(out_[2].reason, FinishReason::kCancelled);
  scheduler_->publish_metrics();
  EXPECT_EQ(metrics_.parked_bytes.load(), 0);
  EXPECT_EQ(in_state(metrics_, GaugeState::kPaused), 0);
  run_until_idle();
  EXPECT_EQ(out_[1].text, expected(100 + 'a', 90));
  EXPECT_EQ(metrics_.resumed_total.load(), 0u);
  EXPECT_EQ(decoder_->total_kv(), 0);
}

TEST_F(SchedulerTest, ANewRequestWaitsBehindAPausedOneAndNeverStealsItsRoom) {
  make(64, /*n_ctx=*/100, /*n_seq=*/4);
  submit(1, "a", 90);
  submit(2, "b", 90);
  while (metrics_.preempted_kv_full_total.load() == 0) {
    scheduler_->tick(events_);
    collect();
  }
  submit(3, "c", 3);  // would fit in the cells left, but request 2 waits ahead of it
  scheduler_->publish_metrics();
  EXPECT_EQ(in_state(metrics_, GaugeState::kQueued), 1);
  const std::vector<RequestId> finish_order = run_recording_finish_order();
  ASSERT_EQ(finish_order.size(), 3u);
  EXPECT_EQ(finish_order[0], 1u);
  EXPECT_EQ(out_[3].text, expected(100 + 'c', 3));
}

TEST_F(SchedulerTest, TheWatermarkKeepsRoomForRunningStreamsButNotForALoneRequest) {
  SchedulerConfig cfg;
  cfg.kv_watermark = 0.25;  // 25 of 100 cells
  make(64, /*n_ctx=*/100, /*n_seq=*/4, cfg);
  submit(1, std::string(90, 'a'), 5);  // alone: 91 cells start although 91 + 25 > 100
  scheduler_->publish_metrics();
  EXPECT_EQ(in_state(metrics_, GaugeState::kPrefill), 1);
  run_until_idle();
  EXPECT_EQ(out_[1].completion_tokens, 5);
  submit(2, std::string(40, 'b'), 30);  // 41 cells
  submit(3, std::string(40, 'c'), 30);  // 41 + 41 + 25 > 100: waits for the watermark
  scheduler_->publish_metrics();
  EXPECT_EQ(in_state(metrics_, GaugeState::kQueued), 1);
  run_until_idle();
  EXPECT_EQ(out_[3].completion_tokens, 30);
}

TEST_F(SchedulerTest, KeptPrefixesGiveTheirCellsBackBeforeAnyStreamIsPaused) {
  SchedulerConfig cfg;
  cfg.prefix.enabled = true;
  cfg.prefix.block = 16;
  cfg.prefix.max_kept = 4;
  cfg.prefix.host_bytes = 0;  // evicted prefixes are dropped
  cfg.unified_keep_unseen_min = 0;
  make(64, /*n_ctx=*/300, /*n_seq=*/8, cfg);
  submit(1, std::string(60, 'p'), 2);
  submit(2, std::string(60, 'q'), 2);
  run_until_idle();
  EXPECT_EQ(metrics_.prefix_kept_cells.load(), 2 * 62);
  submit(3, "a", 120);  // 3 + 4 below would need 2 x 122 cells in the end; 300 - 124 kept = 176
  submit(4, "b", 120);
  run_until_idle();
  EXPECT_EQ(out_[3].text, expected(100 + 'a', 120));
  EXPECT_EQ(out_[4].text, expected(100 + 'b', 120));
  EXPECT_GT(metrics_.prefix_evictions_total.load(), 0u);
  EXPECT_EQ(metrics_.preempted_kv_full_total.load(), 0u) << "evicting kept prefixes was enough";
  EXPECT_EQ(decoder_->kv_exhausted_, 0);
}

TEST_F(SchedulerTest, CellsSharedFromARunningLeaderAreCountedOnce) {
  SchedulerConfig cfg;
  cfg.prefix.enabled = true;
  cfg.prefix.block = 16;
  cfg.unified_keep_unseen_min = 0;
  make(/*n_batch=*/256, /*n_ctx=*/300, /*n_seq=*/8, cfg);
  const std::string shared(150, 's');  // 151 tokens: 4 copies would be 604 cells
  for (RequestId id = 1; id <= 4; ++id) submit(id, shared + static_cast<char>('a' + id), 10);
  run_until_idle();
  for (RequestId id = 1; id <= 4; ++id) EXPECT_EQ(out_[id].text, expected(100 + 'a' + static_cast<Token>(id), 10)) << id;
  EXPECT_EQ(metrics_.prefix_hits_total.load(), 3u);
  EXPECT_EQ(metrics_.preempted_kv_full_total.load(), 0u) << "the shared prompt fits once";
  EXPECT_EQ(decoder_->kv_exhausted_, 0);
}

// Cells shared from a kept prefix stay shared by the requests that took them after the cache lets
// the entry go: they are counted once (by the oldest of those requests), not once per request, so
// the grants stay what the KV holds (16 users of one prompt were counted as 16 copies of it).
TEST_F(SchedulerTest, CellsSharedFromAnEvictedKeptPrefixAreCountedOnce) {
  SchedulerConfig cfg;
  cfg.prefix.enabled = true;
  cfg.prefix.block = 16;
  cfg.prefix.max_kept = 1;    // the next entry kept evicts the one before
  cfg.prefix.host_bytes = 0;  // evicted prefixes are dropped
  cfg.unified_keep_unseen_min = 0;
  make(/*n_batch=*/256, /*n_ctx=*/1000, /*n_seq=*/8, cfg);
  const std::string shared(150, 's');
  submit(1, shared + 'a', 2);
  run_until_idle();
  ASSERT_GT(metrics_.prefix_kept_cells.load(), 150);
  for (RequestId id = 2; id <= 5; ++id) submit(id, shared + static_cast<char>('a' + id), 60);
  run_until_idle(4);  // the four take the kept prefix's cells and decode
  submit(6, std::string(100, 'q'), 2);  // ends soon and is kept in the first entry's place
  std::int32_t worst_over = 0;
  while (scheduler_->has_work()) {
    scheduler_->tick(events_);
    collect();
    scheduler_->publish_metrics();
    // Once the first entry went: a claim counts the cell its next token takes, at most one a
    // running request over what the KV holds.
    if (metrics_.prefix_evictions_total.load() == 0) continue;
    worst_over = std::max(worst_over, static_cast<std::int32_t>(metrics_.kv_cells_granted.load() + metrics_.prefix_kept_cells.load()) -
                                          decoder_->cells_used() - 5);
  }
  for (RequestId id = 2; id <= 5; ++id) EXPECT_EQ(out_[id].text, expected(100 + 'a' + static_cast<Token>(id), 60)) << id;
  EXPECT_EQ(out_[6].text, expected(100 + 'q', 2));
  EXPECT_GT(metrics_.prefix_evictions_total.load(), 0u);
  EXPECT_LE(worst_over, 0) << "cells granted beyond what the KV held";
  EXPECT_EQ(metrics_.preempted_kv_full_total.load(), 0u);
  EXPECT_EQ(decoder_->kv_exhausted_, 0);
}

TEST_F(SchedulerTest, WithPreemptionOffARequestIsGrantedItsWorstCaseUpFront) {
  SchedulerConfig cfg;
  cfg.preemption = false;
  make(64, /*n_ctx=*/100, /*n_seq=*/4, cfg);
  submit(1, "a", 60);  // 62 cells granted at start
  submit(2, "b", 60);  // does not fit next to it: waits, and nobody is ever paused
  scheduler_->publish_metrics();
  EXPECT_EQ(in_state(metrics_, GaugeState::kQueued), 1);
  EXPECT_EQ(metrics_.kv_cells_granted.load(), 62);
  run_until_idle();
  EXPECT_EQ(out_[2].text, expected(100 + 'b', 60));
  EXPECT_EQ(decoder_->parks_, 0);
  EXPECT_EQ(decoder_->kv_exhausted_, 0);
}

}  // namespace
}  // namespace uma
