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

// Prefix cache on, 16-token blocks; every prefix worth copying unless a test says otherwise.
SchedulerConfig with_prefix_cache(std::int32_t min_reuse = 0) {
  SchedulerConfig cfg;
  cfg.prefix.enabled = true;
  cfg.prefix.block = 16;
  cfg.per_seq_min_reuse = min_reuse;
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

// n_batch above n_ubatch (the default, 2048 over passes of 512): a burst arriving while nobody
// decodes goes in in one tick, so its streams decode in step and end on one tick (a closed loop's
// next burst then arrives together too); with streams decoding, a tick stays one pass's worth.
TEST_F(SchedulerTest, PerSequenceKvABurstGoesInAtOnceAndItsStreamsEndTogether) {
  SchedulerConfig cfg;
  cfg.slo_tbt_ms = 1e9;
  decoder_ = std::make_unique<testing_support::FakeDecoder>(/*n_batch=*/2048, /*n_ctx=*/16 * 256, /*n_seq=*/16, /*per_seq=*/true);
  decoder_->set_n_ubatch(512);
  decoder_->on_host_ = true;
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

// Per-sequence KV on a device: prompts that start together get consecutive ids, whatever ids they
// were given (the runtime then pads their chunks to one length and they share passes). Here two
// streams of eight end, their ids scattered among the six still decoding, and two prompts arrive.
class PromptIds : public SchedulerTest {
 protected:
  // Each decode's prompt-chunk ids (sequences with more than one entry), where there are `least`.
  void record_prompt_ids(std::vector<std::vector<std::int32_t>>& seen, std::size_t least) {
    decoder_->on_decode_ = [&seen, least](std::span<const BatchEntry> batch) {
      std::map<std::int32_t, int> n;
      for (const BatchEntry& e : batch) ++n[e.seq];
      std::vector<std::int32_t> prompts;
      for (const auto& [seq, k] : n) {
        if (k > 1) prompts.push_back(seq);
      }
      if (prompts.size() >= least) seen.push_back(prompts);
    };
  }
  // The sequence ids of the prompt chunks each decode carried (entries beyond one).
  std::vector<std::vector<std::int32_t>> prompt_ids_per_decode(bool on_host) {
    SchedulerConfig cfg;
    cfg.slo_tbt_ms = 1e9;
    make(512, /*n_ctx=*/8 * 128, /*n_seq=*/8, cfg, /*per_seq=*/true);
    decoder_->on_host_ = on_host;
    const RequestId b = on_host ? 100 : 0;  // ids of their own per call
    for (RequestId id = b + 1; id <= b + 8; ++id) submit(id, std::string(1, static_cast<char>('a' + id % 100)), id % 3 == 0 ? 4 : 40);
    std::vector<std::vector<std::int32_t>> seen;
    record_prompt_ids(seen, 2);
    for (int i = 0; i < 8; ++i) scheduler_->tick(events_), collect();  // requests 3 and 6 ended
    seen.clear();
    for (RequestId id = b + 11; id <= b + 12; ++id) {
      submit(id, std::string(8 + 3 * (id - b - 11), static_cast<char>('k' + id % 100)), 3);
    }
    run_until_idle();
    for (RequestId id = b + 1; id <= b + 8; ++id) {
      EXPECT_EQ(out_[id].text, expected(100 + 'a' + static_cast<Token>(id % 100), id % 3 == 0 ? 4 : 40)) << id;
    }
    for (RequestId id = b + 11; id <= b + 12; ++id) EXPECT_EQ(out_[id].text, expected(100 + 'k' + static_cast<Token>(id % 100), 3)) << id;
    EXPECT_EQ(decoder_->total_kv(), 0);
    return seen;
  }
};

TEST_F(PromptIds, PerSequenceKvPromptsStartingTogetherGetConsecutiveIdsOnADevice) {
  const auto device = prompt_ids_per_decode(false);
  ASSERT_FALSE(device.empty());
  for (const auto& ids : device) EXPECT_EQ(ids.back() - ids.front() + 1, static_cast<std::int32_t>(ids.size()));
  EXPECT_GT(metrics_.kv_sequence_moves_total.load(), 0u) << "a stream moved out of the way";
  // On the host (no padding there: a padded row costs as much as a prompt token), they stay where they started.
  const auto host = prompt_ids_per_decode(true);
  ASSERT_FALSE(host.empty());
  EXPECT_NE(host.front().back() - host.front().front() + 1, static_cast<std::int32_t>(host.front().size()));
}

// Where the runtime keeps pass graphs, prompts start at the lowest ids (one alone too): a prompt
// pass's ids are part of its graph's shape.
TEST_F(PromptIds, WithKeptPassGraphsPromptsStartAtTheLowestIds) {
  SchedulerConfig cfg;
  cfg.slo_tbt_ms = 1e9;
  make(512, /*n_ctx=*/8 * 128, /*n_seq=*/8, cfg, /*per_seq=*/true);
  decoder_->keeps_graphs_ = true;
  for (RequestId id = 1; id <= 8; ++id) submit(id, std::string(1, static_cast<char>('a' + id)), id % 3 == 0 ? 4 : 40);
  std::vector<std::vector<std::int32_t>> seen;
  record_prompt_ids(seen, 1);
  for (int i = 0; i < 8; ++i) scheduler_->tick(events_), collect();  // requests 3 and 6 ended
  seen.clear();
  submit(11, std::string(8, 'k'), 3);
  submit(12, std::string(11, 'l'), 3);
  for (int i = 0; i < 3; ++i) scheduler_->tick(events_), collect();
  submit(13, std::string(9, 'm'), 3);  // alone
  run_until_idle();
  ASSERT_GE(seen.size(), 2u);
  EXPECT_EQ(seen[0], (std::vector<std::int32_t>{0, 1}));
  EXPECT_EQ(seen.back(), (std::vector<std::int32_t>{0}));
  EXPECT_GT(metrics_.kv_sequence_moves_total.load(), 0u) << "streams moved out of the way";
  for (RequestId id = 1; id <= 8; ++id) EXPECT_EQ(out_[id].text, expected(100 + 'a' + static_cast<Token>(id), id % 3 == 0 ? 4 : 40)) << id;
  EXPECT_EQ(out_[11].text, expected(100 + 'k', 3));
  EXPECT_EQ(out_[12].text, expected(100 + 'l', 3));
  EXPECT_EQ(out_[13].text, expected(100 + 'm', 3));
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

// Kept prefixes hold no ids of their own: a finished session's stream stays where it ran, and the
// next request with its prefix takes that stream over, nothing copied; a start that needs an id
// evicts a kept stream.
TEST_F(SchedulerTest, PerSequenceKvKeepsAPrefixInItsStreamAndTheNextRequestTakesItOver) {
  SchedulerConfig cfg = with_prefix_cache();
  cfg.compact_after_ticks = 0;
  make(64, /*n_ctx=*/2 * 128, /*n_seq=*/2, cfg, /*per_seq=*/true);
  const std::string shared(40, 'x');
  submit(1, shared + "a", 4);
  submit(2, "short", 30);  // still running when 1 ends
  run_until_idle();
  EXPECT_EQ(metrics_.prefix_kept_sequences.load(), 2) << "both were kept, each where it ran";
  EXPECT_GT(decoder_->kv_tokens(0), 0);
  EXPECT_GT(decoder_->kv_tokens(1), 0);
  EXPECT_EQ(decoder_->moves_, 0) << "keeping moved nothing";
  submit(3, shared + "b", 4);  // takes 1's stream over
  run_until_idle();
  EXPECT_EQ(out_[3].text, expected(100 + 'b', 4));
  EXPECT_EQ(decoder_->adopted_tokens_, 41) << "BOS + 40 shared tokens reused in place";
  EXPECT_EQ(decoder_->shared_tokens_, 0) << "nothing copied between streams";
  EXPECT_EQ(metrics_.prefix_adopted_total.load(), 1u);
  EXPECT_EQ(metrics_.prefix_reused_tokens_total.load(), 41u);
  submit(4, "other", 10);  // no id free: 2's stream (least recently used) is evicted for it
  submit(5, "again", 10);
  run_until_idle();
  EXPECT_EQ(out_[4].text, expected(100 + 'r', 10));
  EXPECT_EQ(out_[5].text, expected(100 + 'n', 10));
  EXPECT_GE(metrics_.prefix_evictions_total.load(), 2u);
  EXPECT_EQ(decoder_->max_excess_passes_, 0);
}

// Unified KV, per-sequence streams: the cache makes a server hold what its sessions hold. Several
// requests at once with one prefix: the first takes the kept stream over, the others copy from it
// live (a copy between streams), and nothing is evicted while a free id is left.
TEST_F(SchedulerTest, PerSequenceKvRequestsArrivingTogetherTakeOverOneKeptStreamAndCopyFromIt) {
  make(64, /*n_ctx=*/4 * 128, /*n_seq=*/4, with_prefix_cache(), /*per_seq=*/true);
  const std::string shared(40, 'x');
  submit(1, shared + "a", 2);
  run_until_idle();
  ASSERT_EQ(metrics_.prefix_kept_sequences.load(), 1);
  for (RequestId id = 2; id <= 4; ++id) submit(id, shared + std::string(1, static_cast<char>('a' + id)), 3);
  run_until_idle();
  for (RequestId id = 2; id <= 4; ++id) EXPECT_EQ(out_[id].text, expected(100 + 'a' + static_cast<Token>(id), 3)) << id;
  EXPECT_EQ(decoder_->adopted_tokens_, 41);
  EXPECT_EQ(decoder_->shared_tokens_, 2 * 41) << "the two others copied the prefix from the first";
  EXPECT_EQ(metrics_.prefix_reused_tokens_total.load(), 3 * 41u);
  EXPECT_EQ(metrics_.prefix_evictions_total.load(), 0u);
  EXPECT_EQ(metrics_.prefix_kept_sequences.load(), 3) << "three streams kept, the fourth id was never used";
}

// A kept stream between two running ones is a gap the next arrival never fills (it takes a free
// id). One that has been reused (here another request began with its first block) is moved above
// the running ones at compaction, the top one into its id, and stays reusable where it went.
TEST_F(SchedulerTest, PerSequenceKvMovesAReusedKeptStreamOutOfTheRunningIds) {
  SchedulerConfig cfg = with_prefix_cache();
  cfg.compact_after_ticks = 0;
  make(64, /*n_ctx=*/5 * 128, /*n_seq=*/5, cfg, /*per_seq=*/true);
  const std::string shared(40, 'x');
  submit(1, "long one", 40);  // id 0
  submit(2, shared + "a", 2);  // id 1: ends first, kept
  submit(3, "long two", 40);  // id 2
  submit(5, shared + "c", 40);  // id 3: began with 2's first block (and copied 2's prefix)
  while (out_[2].done == 0) {
    scheduler_->tick(events_);
    collect();
  }
  ASSERT_EQ(metrics_.prefix_kept_sequences.load(), 1);
  scheduler_->tick(events_);
  collect();
  EXPECT_EQ(decoder_->span_holes_, 0) << "the running ids are one run again";
  EXPECT_EQ(decoder_->moves_, 2) << "the kept stream went up, the top running one into its id";
  EXPECT_GT(decoder_->kv_tokens(4), 0) << "the kept stream is in the highest free id";
  submit(4, shared + "b", 4);
  run_until_idle();
  EXPECT_EQ(out_[4].text, expected(100 + 'b', 4));
  EXPECT_EQ(out_[1].text, expected(100 + 'e', 40));
  EXPECT_EQ(out_[3].text, expected(100 + 'o', 40));
  EXPECT_EQ(out_[5].text, expected(100 + 'c', 40));
  EXPECT_EQ(decoder_->adopted_tokens_, 41) << "the moved stream was taken over";
  EXPECT_EQ(metrics_.prefix_evictions_total.load(), 0u);
}

// Under churn most finished streams are never reused, and one kept between running ones is a gap
// that a move would have to close (a copy and a new worst-case graph on a GPU). So a stream nothing
// has reused is not kept where it would be such a gap, and one kept that becomes one (an arrival
// took an id above it) gives its id to the next arrival. The running ids stay one run, no moves.
TEST_F(SchedulerTest, PerSequenceKvKeepsNoUnreusedStreamBetweenRunningOnes) {
  SchedulerConfig cfg = with_prefix_cache();
  cfg.compact_after_ticks = 1000;  // only arrivals close gaps
  make(64, /*n_ctx=*/4 * 128, /*n_seq=*/4, cfg, /*per_seq=*/true);
  submit(1, "long one", 40);                  // id 0
  submit(2, std::string(40, 'x') + "a", 2);   // id 1: ends first, between 0 and 2
  submit(3, "long two", 40);                  // id 2
  while (out_[2].done == 0) {
    scheduler_->tick(events_);
    collect();
  }
  EXPECT_EQ(metrics_.prefix_kept_sequences.load(), 0) << "not kept: it would be a gap nothing fills";
  submit(4, std::string(40, 'y') + "b", 20);  // takes the freed id 1
  scheduler_->tick(events_);
  collect();
  EXPECT_EQ(decoder_->span_holes_, 0);
  run_until_idle();
  EXPECT_EQ(decoder_->moves_, 0);
  EXPECT_EQ(decoder_->kv_tokens(3), 0) << "id 3 was never used";
  EXPECT_EQ(out_[4].text, expected(100 + 'b', 20));
  EXPECT_EQ(out_[1].text, expected(100 + 'e', 40));
  EXPECT_EQ(out_[3].text, expected(100 + 'o', 40));
}

TEST_F(SchedulerTest, PerSequenceKvAnArrivalTakesTheIdOfAKeptStreamNothingReused) {
  SchedulerConfig cfg = with_prefix_cache();
  cfg.compact_after_ticks = 1000;
  make(64, /*n_ctx=*/4 * 128, /*n_seq=*/4, cfg, /*per_seq=*/true);
  submit(1, "long one", 40);                  // id 0
  submit(2, std::string(40, 'x') + "a", 2);   // id 1: ends first, above every running id: kept
  while (out_[2].done == 0) {
    scheduler_->tick(events_);
    collect();
  }
  ASSERT_EQ(metrics_.prefix_kept_sequences.load(), 1);
  submit(3, std::string(40, 'y') + "b", 20);  // id 2 is free, but it would leave 1 a gap
  scheduler_->tick(events_);
  collect();
  EXPECT_EQ(metrics_.prefix_evictions_total.load(), 1u) << "the kept stream made way";
  EXPECT_EQ(decoder_->span_holes_, 0) << "the running ids are one run";
  run_until_idle();
  EXPECT_EQ(decoder_->moves_, 0);
  EXPECT_EQ(decoder_->kv_tokens(2), 0) << "id 2 was never used";
  EXPECT_EQ(out_[3].text, expected(100 + 'b', 20));
  EXPECT_EQ(out_[1].text, expected(100 + 'e', 40));
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

// A copy between streams costs a graph reserve on a GPU: a short prefix is recomputed rather than
// copied from a live session. Taking a kept stream over copies nothing, so any length is reused.
TEST_F(SchedulerTest, PerSequenceKvDoesNotCopyShortPrefixesButTakesAKeptOneOver) {
  SchedulerConfig cfg = with_prefix_cache(/*min_reuse=*/64);
  make(64, /*n_ctx=*/6 * 128, /*n_seq=*/6, cfg, /*per_seq=*/true);
  submit(1, std::string(40, 'x') + "a", 40);  // 42 tokens: under 64
  scheduler_->tick(events_);
  collect();
  submit(2, std::string(40, 'x') + "b", 4);  // 1 is live: too short to copy from it
  run_until_idle();
  EXPECT_EQ(out_[2].text, expected(100 + 'b', 4));
  EXPECT_EQ(decoder_->shared_tokens_, 0);
  EXPECT_EQ(decoder_->adopted_tokens_, 0);
  submit(3, std::string(40, 'x') + "c", 4);  // a kept stream holds the prefix: taken over
  run_until_idle();
  EXPECT_EQ(out_[3].text, expected(100 + 'c', 4));
  EXPECT_EQ(decoder_->shared_tokens_, 0);
  EXPECT_EQ(decoder_->adopted_tokens_, 41);
}

}  // namespace
}  // namespace uma
