// Per-sequence KV (llama.cpp's KV streams) in the scheduler, against the fake decoder in its
// per-sequence mode (each id holds n_ctx / n_seq cells; it counts, per decode, the runs of
// consecutive sequence ids, which is how many passes llama.cpp would make over the weights).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "sched/scheduler_test_support.h"

namespace uma {
namespace {

using testing_support::SchedulerTest;

// Prefix cache on, 16-token blocks; every prefix worth copying and every finished sequence kept
// unless a test says otherwise.
SchedulerConfig with_prefix_cache(std::int32_t min_reuse = 0, std::int32_t keep_unseen_min = 0) {
  SchedulerConfig cfg;
  cfg.prefix.enabled = true;
  cfg.prefix.block = 16;
  cfg.per_seq_min_reuse = min_reuse;
  cfg.per_seq_keep_unseen_min = keep_unseen_min;
  return cfg;
}

TEST_F(SchedulerTest, PerSequenceKvKeepsRunningSequencesDenseUnderChurn) {
  SchedulerConfig cfg;
  cfg.compact_after_ticks = 0;  // close every gap at once
  make(64, /*n_ctx=*/8 * 64, /*n_seq=*/8, cfg, /*per_seq=*/true);
  // Different lengths, so sessions end out of id order and leave gaps; more arrive midway.
  for (RequestId id = 1; id <= 6; ++id) submit(id, std::string(1, static_cast<char>('a' + id)), 3 + (id * 7) % 23);
  for (int t = 0; t < 12; ++t) {
    scheduler_->tick(events_);
    collect();
  }
  for (RequestId id = 7; id <= 12; ++id) submit(id, std::string(1, static_cast<char>('a' + id)), 3 + (id * 5) % 17);
  run_until_idle();
  for (RequestId id = 1; id <= 12; ++id) {
    const std::int32_t n = id <= 6 ? 3 + (id * 7) % 23 : 3 + (id * 5) % 17;
    EXPECT_EQ(out_[id].text, expected(100 + 'a' + static_cast<Token>(id), n)) << id;
  }
  EXPECT_GT(decoder_->moves_, 0) << "a gap was closed by moving a running sequence";
  EXPECT_EQ(metrics_.kv_sequence_moves_total.load(), static_cast<std::uint64_t>(decoder_->moves_));
  EXPECT_EQ(decoder_->max_excess_passes_, 0) << "decode rows were never cut by a prefilling sequence or a gap";
  EXPECT_EQ(decoder_->total_kv(), 0) << "every sequence freed";
}

// Per-sequence KV: a tick may prefill the whole batch next to running streams (each prompt chunk
// is a pass of its own there, so several prompts in one tick beat one prompt a tick); a unified
// KV keeps the small floor. An explicit per_seq_min_prefill is honoured.
class PrefillFloor : public SchedulerTest {
 protected:
  std::size_t biggest_tick_beside_a_stream(bool per_seq, std::int32_t per_seq_min_prefill) {
    SchedulerConfig cfg;
    cfg.start_budget = 8;
    cfg.per_seq_min_prefill = per_seq_min_prefill;
    make(64, /*n_ctx=*/8 * 128, /*n_seq=*/8, cfg, per_seq);
    submit(1, "a", 40);  // a running stream
    scheduler_->tick(events_);
    scheduler_->tick(events_);
    collect();
    for (RequestId id = 2; id <= 4; ++id) submit(id, std::string(9, static_cast<char>('a' + id)), 2);  // 10 tokens each
    decoder_->max_batch_ = 0;
    scheduler_->tick(events_);
    collect();
    const std::size_t biggest = decoder_->max_batch_;
    run_until_idle();
    for (RequestId id = 2; id <= 4; ++id) EXPECT_EQ(out_[id].text, expected(100 + 'a' + static_cast<Token>(id), 2)) << id;
    return biggest;
  }
};

TEST_F(PrefillFloor, PerSequenceKvPrefillsSeveralPromptsInOneTickBesideRunningStreams) {
  EXPECT_EQ(biggest_tick_beside_a_stream(/*per_seq=*/true, -1), 1u + 30u);
}

TEST_F(PrefillFloor, PerSequenceKvHonoursAnExplicitMinimumPrefill) {
  EXPECT_EQ(biggest_tick_beside_a_stream(/*per_seq=*/true, 10), 1u + 10u);
}

TEST_F(PrefillFloor, UnifiedKvKeepsTheSmallPrefillFloorBesideRunningStreams) {
  EXPECT_EQ(biggest_tick_beside_a_stream(/*per_seq=*/false, -1), 1u + 8u);
}

// n_batch above n_ubatch (the CPU default, 2048 over passes of 512): a burst arriving while nobody
// decodes goes in in one tick, so its streams decode in step and end on one tick (a closed loop's
// next burst then arrives together too); with streams decoding, a tick stays one pass's worth.
TEST_F(SchedulerTest, PerSequenceKvABurstGoesInAtOnceAndItsStreamsEndTogether) {
  SchedulerConfig cfg;
  cfg.slo_tbt_ms = 1e9;
  decoder_ = std::make_unique<testing_support::FakeDecoder>(/*n_batch=*/2048, /*n_ctx=*/16 * 256, /*n_seq=*/16, /*per_seq=*/true);
  decoder_->set_n_ubatch(512);
  scheduler_ = std::make_unique<Scheduler>(*decoder_, metrics_, cfg, clock_);
  std::vector<std::size_t> sizes;
  decoder_->on_decode_ = [&](std::span<const BatchEntry> b) { sizes.push_back(b.size()); };
  for (RequestId id = 1; id <= 8; ++id) submit(id, std::string(128, static_cast<char>('a' + id)), 20);  // 129 tokens
  std::map<RequestId, int> ended_at;
  for (int t = 0; t < 100 && scheduler_->has_work(); ++t) {
    scheduler_->tick(events_);
    for (const Event& e : events_) {
      if (e.kind == Event::Kind::kDone) ended_at[e.request_id] = t;
    }
    collect();
  }
  ASSERT_FALSE(sizes.empty());
  EXPECT_EQ(sizes.front(), 8u * 129u) << "the whole burst in the first decode";
  ASSERT_EQ(ended_at.size(), 8u);
  for (const auto& [id, t] : ended_at) EXPECT_EQ(t, ended_at.begin()->second) << id;
  for (RequestId id = 1; id <= 8; ++id) EXPECT_EQ(out_[id].text, expected(100 + 'a' + static_cast<Token>(id), 20)) << id;

  // A stream decoding, six prompts arriving: every tick stays within one pass.
  submit(20, "z", 30);
  scheduler_->tick(events_);
  scheduler_->tick(events_);
  collect();
  for (RequestId id = 21; id <= 26; ++id) submit(id, std::string(128, static_cast<char>('a' + id)), 2);
  sizes.clear();
  run_until_idle();
  ASSERT_FALSE(sizes.empty());
  EXPECT_LE(*std::max_element(sizes.begin(), sizes.end()), 512u);
  for (RequestId id = 21; id <= 26; ++id) EXPECT_EQ(out_[id].text, expected(100 + 'a' + static_cast<Token>(id), 2)) << id;
  EXPECT_EQ(decoder_->total_kv(), 0);
}

TEST_F(SchedulerTest, PerSequenceKvLimitsARequestToOneSequencesCells) {
  make(64, /*n_ctx=*/4 * 64, /*n_seq=*/4, {}, /*per_seq=*/true);
  submit(1, "abc", 100);  // 4 prompt tokens + 100 > 64 cells of one sequence
  EXPECT_EQ(out_[1].errors, 1);
  EXPECT_EQ(out_[1].error, ErrorCode::kContextExceeded);
  EXPECT_EQ(out_[1].param, "max_tokens");
  submit(2, "abc", 0);  // not asked: up to the sequence's end
  submit(3, "abd", 0);
  run_until_idle();
  EXPECT_EQ(out_[2].reason, FinishReason::kLength);
  EXPECT_EQ(out_[2].text, expected(100 + 'c', 60));
  EXPECT_EQ(out_[3].text, expected(100 + 'd', 60));
  EXPECT_EQ(decoder_->kv_exhausted_, 0);
}

TEST_F(SchedulerTest, PerSequenceKvKeepsPrefixesAboveTheSessionsIds) {
  SchedulerConfig cfg = with_prefix_cache();
  cfg.prefix.max_kept = 2;
  cfg.compact_after_ticks = 0;
  make(64, /*n_ctx=*/6 * 128, /*n_seq=*/4 + 2, cfg, /*per_seq=*/true);
  const std::string shared(40, 'x');
  submit(1, shared + "a", 4);
  submit(2, "short", 30);  // still running when 1 ends: 1's id is below it
  run_until_idle();
  EXPECT_EQ(metrics_.prefix_kept_sequences.load(), 2) << "both were kept";
  EXPECT_GT(decoder_->kv_tokens(4), 0) << "kept sequences live in the cache's ids (1's moved from below 2's)";
  EXPECT_GT(decoder_->kv_tokens(5), 0);
  for (std::int32_t seq = 0; seq < 4; ++seq) EXPECT_EQ(decoder_->kv_tokens(seq), 0) << seq;
  submit(3, shared + "b", 4);
  submit(4, "other", 10);
  run_until_idle();
  EXPECT_EQ(out_[3].text, expected(100 + 'b', 4));
  EXPECT_EQ(out_[4].text, expected(100 + 'r', 10));
  EXPECT_EQ(metrics_.prefix_reused_tokens_total.load(), 41u);
  EXPECT_EQ(decoder_->max_excess_passes_, 0);
}

TEST_F(SchedulerTest, PerSequenceKvClosesAGapOnlyWhenItOutlivesTheArrivals) {
  SchedulerConfig cfg;
  cfg.compact_after_ticks = 5;
  make(64, /*n_ctx=*/4 * 64, /*n_seq=*/4, cfg, /*per_seq=*/true);
  submit(1, "a", 2);   // ends first: a gap at id 0
  submit(2, "b", 40);
  for (int t = 0; t < 3; ++t) {
    scheduler_->tick(events_);
    collect();
  }
  ASSERT_EQ(out_[1].done, 1);
  submit(3, "c", 40);  // an arrival fills the gap (and outlasts 2): nothing moves
  run_until_idle();
  EXPECT_EQ(decoder_->moves_, 0);
  submit(4, "d", 2);
  submit(5, "e", 30);
  run_until_idle();  // 4's gap outlives 5 ticks: 5 moves down once
  EXPECT_EQ(decoder_->moves_, 1);
  EXPECT_EQ(out_[5].text, expected(100 + 'e', 30));
}

TEST_F(SchedulerTest, PerSequenceKvDoesNotCopyShortPrefixes) {
  SchedulerConfig cfg = with_prefix_cache(/*min_reuse=*/64);
  make(64, /*n_ctx=*/6 * 128, /*n_seq=*/6, cfg, /*per_seq=*/true);
  submit(1, std::string(40, 'x') + "a", 4);  // 46 tokens: under 64
  run_until_idle();
  submit(2, std::string(40, 'x') + "b", 4);
  run_until_idle();
  EXPECT_EQ(out_[2].text, expected(100 + 'b', 4));
  EXPECT_EQ(metrics_.prefix_kept_sequences.load(), 0);
  EXPECT_EQ(decoder_->shared_tokens_, 0);
  submit(3, std::string(80, 'y') + "a", 4);  // 86 tokens: kept and reused
  run_until_idle();
  submit(4, std::string(80, 'y') + "b", 4);
  run_until_idle();
  EXPECT_EQ(out_[4].text, expected(100 + 'b', 4));
  EXPECT_EQ(decoder_->shared_tokens_, 81);
}

TEST_F(SchedulerTest, PerSequenceKvKeepsOnlyPrefixesThatStartedTwiceOrAreLong) {
  SchedulerConfig cfg = with_prefix_cache(0, /*keep_unseen_min=*/100);
  make(64, /*n_ctx=*/6 * 256, /*n_seq=*/6, cfg, /*per_seq=*/true);
  const std::string shared(40, 'x');
  submit(1, shared + "a", 4);  // nothing else began like it: let go, no copy between streams
  run_until_idle();
  EXPECT_EQ(metrics_.prefix_kept_sequences.load(), 0);
  EXPECT_EQ(metrics_.prefix_not_kept_total.load(), 1u);
  EXPECT_EQ(decoder_->moves_, 0);
  submit(2, shared + "b", 4);  // the second start with this first block: kept
  run_until_idle();
  EXPECT_EQ(decoder_->shared_tokens_, 0) << "1 was not kept, so 2 prefilled its prompt";
  EXPECT_EQ(metrics_.prefix_kept_sequences.load(), 1);
  submit(3, shared + "c", 4);
  run_until_idle();
  EXPECT_EQ(out_[3].text, expected(100 + 'c', 4));
  EXPECT_EQ(decoder_->shared_tokens_, 41) << "3 reused 2's prefix";
  EXPECT_EQ(metrics_.prefix_kept_sequences.load(), 2) << "3 began like 1 and 2: kept too";
  submit(4, std::string(120, 'z') + "a", 4);  // never seen, but long enough to be worth a copy
  run_until_idle();
  EXPECT_EQ(metrics_.prefix_kept_sequences.load(), 3);
  EXPECT_EQ(metrics_.prefix_not_kept_total.load(), 1u);
  EXPECT_EQ(decoder_->max_excess_passes_, 0);
}

TEST_F(SchedulerTest, PerSequenceKvNeverRestoresIntoAStreamStillBeingCopiedOut) {
  SchedulerConfig cfg = with_prefix_cache();
  cfg.prefix.max_kept = 1;
  make(64, /*n_ctx=*/2 * 128, /*n_seq=*/1 + 1, cfg, /*per_seq=*/true);  // one session id, one cache id
  submit_background(1, "bbbb", 40);
  for (int i = 0; i < 6; ++i) scheduler_->tick(events_);
  collect();
  submit(2, std::string(20, 'i'), 3);  // pauses 1 (KV saved), takes id 0
  ASSERT_EQ(metrics_.preempted_saved_total.load(), 1u);
  // 2 ends and is kept: its stream is copied from id 0 to the cache's id at the next decode, and
  // 1 comes back into id 0 before that: its saved KV must not land in a stream still being copied
  // out, so it is recomputed (same output).
  run_until_idle();
  EXPECT_EQ(out_[2].text, expected(100 + 'i', 3));
  EXPECT_EQ(out_[1].text, expected(100 + 'b', 40)) << "paused and resumed as if never paused";
  EXPECT_EQ(metrics_.prefix_kept_sequences.load(), 1);
  EXPECT_EQ(decoder_->pending_refusals_, 1);
  EXPECT_EQ(metrics_.kv_restore_fallbacks_total.load(), 1u);
}

}  // namespace
}  // namespace uma
