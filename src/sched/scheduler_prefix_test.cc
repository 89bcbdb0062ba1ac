// The prefix cache in the scheduler, against the fake decoder (next token = last + 1; KV positions
// checked): reuse of kept sequences, followers of a running prompt, eviction to host and back,
// and a colliding hash that must never serve another prompt's KV.
#include <gtest/gtest.h>


#include "sched/scheduler_test_support.h"

namespace uma {
namespace {

using testing_support::SchedulerTest;

const std::string kShared(80, 'x');  // 81 tokens with the BOS

SchedulerConfig cache_config(std::int32_t kept = 4) {
  SchedulerConfig cfg;
  cfg.prefix.enabled = true;
  cfg.prefix.block = 16;
  cfg.prefix.max_kept = kept;
  cfg.unified_keep_unseen_min = 0;  // these test reuse itself: every finished sequence is kept
  return cfg;
}

TEST_F(SchedulerTest, UnifiedKvKeepsAShortPrefixOnlyWhenAnotherRequestBeganLikeIt) {
  SchedulerConfig cfg = cache_config();
  cfg.unified_keep_unseen_min = 200;
  make(64, 2048, 8, cfg);
  submit(1, kShared + "aaaa", 4);  // 85 tokens, a first block nobody else began with: let go
  run_until_idle();
  EXPECT_EQ(metrics_.prefix_kept_sequences.load(), 0);
  EXPECT_EQ(metrics_.prefix_not_kept_total.load(), 1u);
  EXPECT_EQ(decoder_->total_kv(), 0) << "its cells are free: no running stream attends over them";
  submit(2, kShared + "bbbb", 4);  // the second start with that block: kept
  run_until_idle();
  EXPECT_EQ(metrics_.prefix_kept_sequences.load(), 1);
  submit(3, kShared + "cccc", 4);
  run_until_idle();
  EXPECT_EQ(out_[3].text, expected(100 + 'c', 4));
  EXPECT_EQ(metrics_.prefix_reused_tokens_total.load(), 81u);
  submit(4, std::string(250, 'y'), 4);  // never seen, but long enough to be worth keeping
  run_until_idle();
  EXPECT_EQ(metrics_.prefix_not_kept_total.load(), 1u);
}

TEST_F(SchedulerTest, AFinishedSequenceIsKeptAndItsPrefixReused) {
  make(64, 4096, /*n_seq=*/8, cache_config());
  submit(1, kShared + "aaaa", 4);
  run_until_idle();
  EXPECT_EQ(metrics_.prefix_kept_sequences.load(), 1);
  submit(2, kShared + "bbbb", 4);
  run_until_idle();
  EXPECT_EQ(out_[2].text, expected(100 + 'b', 4));
  EXPECT_EQ(decoder_->shared_tokens_, 81);
  EXPECT_EQ(metrics_.prefix_hits_total.load(), 1u);
  EXPECT_EQ(metrics_.prefix_reused_tokens_total.load(), 81u);
  EXPECT_EQ(metrics_.prefix_lookups_total.load(), 2u);
}

TEST_F(SchedulerTest, AtLeastTheLastPromptTokenIsEvaluated) {
  make(64, 4096, 8, cache_config());
  submit(1, kShared, 4);
  run_until_idle();
  submit(2, kShared, 4);  // the same prompt: all but its last token come from the cache
  run_until_idle();
  EXPECT_EQ(out_[2].text, expected(100 + 'x', 4));
  EXPECT_EQ(metrics_.prefix_reused_tokens_total.load(), 80u);
}

TEST_F(SchedulerTest, ConcurrentRequestsFollowTheFirstOnesPrefill) {
  SchedulerConfig cfg = cache_config();
  make(/*n_batch=*/16, 4096, 8, cfg);  // the first prompt takes several ticks
  submit(1, kShared + "aaaaaaaa", 4);
  submit(2, kShared + "bbbbbbbb", 4);
  submit(3, kShared + "cccccccc", 4);
  run_until_idle();
  EXPECT_EQ(out_[1].text, expected(100 + 'a', 4));
  EXPECT_EQ(out_[2].text, expected(100 + 'b', 4));
  EXPECT_EQ(out_[3].text, expected(100 + 'c', 4));
  EXPECT_EQ(metrics_.prefix_hits_total.load(), 2u);
  EXPECT_EQ(decoder_->shared_tokens_, 2 * 81);
}

// The backlog a router weighs (uma:agent's prefill_backlog_tokens): followers count only what they
// will compute themselves, not the prefix their leader is computing for them.
TEST_F(SchedulerTest, ThePrefillBacklogLeavesOutWhatFollowersWillShare) {
  make(/*n_batch=*/16, 4096, 8, cache_config());
  submit(1, kShared + "aaaaaaaa", 4);  // 89 tokens
  submit(2, kShared + "bbbbbbbb", 4);
  submit(3, kShared + "cccccccc", 4);
  scheduler_->tick(events_);
  scheduler_->publish_metrics();
  // The leader's rest (at most 89) and 8 tokens for each follower (81 shared), not 2 x 89 more.
  EXPECT_GT(metrics_.prefill_backlog_tokens.load(), 2 * 8);
  EXPECT_LE(metrics_.prefill_backlog_tokens.load(), 89 + 2 * 8);
  run_until_idle();
  scheduler_->publish_metrics();
  EXPECT_EQ(metrics_.prefill_backlog_tokens.load(), 0);
}

TEST_F(SchedulerTest, AFollowerWhoseLeaderIsCancelledPrefillsItself) {
  make(/*n_batch=*/16, 4096, 8, cache_config());
  submit(1, kShared + "aaaaaaaa", 40);
  submit(2, kShared + "bbbbbbbb", 4);
  scheduler_->tick(events_);
  scheduler_->cancel(1, events_);
  collect();
  run_until_idle();
  EXPECT_EQ(out_[2].text, expected(100 + 'b', 4));
  EXPECT_EQ(decoder_->total_kv() - metrics_.prefix_kept_cells.load(), 0) << "only kept sequences hold KV";
}

TEST_F(SchedulerTest, KeptSequencesGiveTheirCellsBackAndComeBackFromHostMemory) {
  // n_ctx 400: requests 1 and 11 leave 88 + 7 kept cells; request 2 grows to 330 and evicts them.
  make(64, /*n_ctx=*/400, 8, cache_config());
  submit(1, kShared + "aaaa", 4);
  run_until_idle();
  EXPECT_EQ(metrics_.prefix_kept_cells.load(), 88);
  submit(11, kShared + "bbbb", 4);  // reuses request 1's prefix: that entry is worth host memory now
  run_until_idle();
  submit(2, std::string(30, 'q'), 299);  // 31 + 299 = 330 cells
  run_until_idle();
  EXPECT_EQ(out_[2].completion_tokens, 299);
  EXPECT_GE(metrics_.prefix_evictions_total.load(), 1u);
  EXPECT_EQ(metrics_.prefix_host_snapshots.load(), 2) << "both leaves went to host memory";
  submit(3, kShared + "cccc", 4);  // evicts request 2's sequence; restores 1's snapshot, then shares
  run_until_idle();
  EXPECT_EQ(out_[3].text, expected(100 + 'c', 4));
  EXPECT_EQ(metrics_.prefix_reused_tokens_total.load(), 2 * 81u);
}

// Unified KV offloads idle entries every 2 s; a chat's next turn, or a group's next user, comes
// later. Every leaf goes to host memory, reused yet or not; an entry that a later one extends (a
// chat's earlier turn) is redundant and dropped, even though it served a hit.
TEST_F(SchedulerTest, IdleLeavesGoToHostMemoryAndEntriesTheyExtendAreDropped) {
  SchedulerConfig cfg = cache_config();
  cfg.prefix.idle_ms = 5;
  make(64, 4096, 8, cfg);
  const auto offload = [&](RequestId id, char c) {  // unrelated work: its first tick offloads idle entries
    clock_.advance(std::chrono::milliseconds(10));
    submit(id, std::string(20, c), 1);
    scheduler_->tick(events_);
    collect();
    run_until_idle();
  };
  submit(1, kShared + "aaaa", 1);  // one token: its sequence holds the prompt, 85 tokens
  run_until_idle();
  offload(2, 'z');
  EXPECT_EQ(metrics_.prefix_host_snapshots.load(), 1) << "never reused, but a leaf";
  std::uint64_t reused = metrics_.prefix_reused_tokens_total.load();
  submit(3, kShared + "aaaa" + "bbbb", 1);  // the next turn: request 1's whole sequence, restored
  run_until_idle();
  EXPECT_EQ(metrics_.prefix_reused_tokens_total.load() - reused, 85u);
  offload(4, 'y');
  // Request 3's sequence and request 2's are leaves; request 1's, which request 3's extends, was
  // dropped; request 4's is still in the KV cache.
  EXPECT_EQ(metrics_.prefix_host_snapshots.load(), 2);
  EXPECT_EQ(metrics_.prefix_kept_sequences.load(), 1);
  reused = metrics_.prefix_reused_tokens_total.load();
  submit(5, kShared + "cccc", 2);  // another user of the shared prefix: request 3's snapshot serves it
  run_until_idle();
  EXPECT_EQ(out_[5].text, expected(100 + 'c', 2));
  EXPECT_EQ(metrics_.prefix_reused_tokens_total.load() - reused, 81u);
}

TEST_F(SchedulerTest, IdleKeptSequencesMoveToHostMemoryAndStillServeHits) {
  SchedulerConfig cfg = cache_config();
  cfg.prefix.idle_ms = 5;
  make(64, 4096, 8, cfg);
  submit(1, kShared + "aaaa", 4);
  run_until_idle();
  submit(11, kShared + "bbbb", 4);  // a hit: request 1's entry is worth keeping in host memory
  run_until_idle();
  EXPECT_EQ(metrics_.prefix_kept_sequences.load(), 2);
  clock_.advance(std::chrono::milliseconds(10));
  submit(2, std::string(20, 'z'), 2);  // unrelated work: its first tick offloads the idle entries
  scheduler_->tick(events_);
  collect();
  EXPECT_EQ(metrics_.prefix_kept_sequences.load(), 0) << "out of the KV cache";
  EXPECT_EQ(metrics_.prefix_host_snapshots.load(), 2) << "both leaves";
  run_until_idle();
  submit(3, kShared + "cccc", 4);
  run_until_idle();
  EXPECT_EQ(out_[3].text, expected(100 + 'c', 4));
  EXPECT_EQ(metrics_.prefix_reused_tokens_total.load(), 2 * 81u) << "restored from host memory";
}

// Per-sequence KV (the GPU's) sends an entry to host memory only once it served a hit: a copy
// there is a device-to-host transfer. A group's users arriving together follow the first (a live
// hit, no kept entry is hit): the leader's sequence served them, which counts.
TEST_F(SchedulerTest, PerSequenceKvSendsALeaderThatServedFollowersToHostMemory) {
  SchedulerConfig cfg = cache_config(/*kept=*/1);
  cfg.per_seq_min_reuse = 0;
  make(/*n_batch=*/64, /*n_ctx=*/4 * 256, /*n_seq=*/4, cfg, /*per_seq=*/true);
  submit(1, kShared + "aaaa", 2);
  submit(2, kShared + "bbbb", 8);  // follows request 1; ends later, when request 1's is kept
  run_until_idle();
  EXPECT_EQ(out_[2].text, expected(100 + 'b', 8));
  // One kept id: request 2's sequence took it, and request 1's went to host memory.
  EXPECT_EQ(metrics_.prefix_kept_sequences.load(), 1);
  EXPECT_EQ(metrics_.prefix_host_snapshots.load(), 1) << "the leader's, which served a follower";
  submit(3, std::string(40, 'q'), 2);  // an unrelated prompt: request 2's, never reused, is dropped
  run_until_idle();
  EXPECT_EQ(metrics_.prefix_host_snapshots.load(), 1);
}

// One system prompt, a different question each time. Per-sequence KV: each request takes the
// last one's kept stream over, so nothing is copied, evicted or sent to host memory (a copy out
// was 400 MB and 300 ms of the compute thread per 3000-token 8B entry on a GPU).
TEST_F(SchedulerTest, PerSequenceKvOneSystemPromptADifferentQuestionEachTimeCopiesNothing) {
  SchedulerConfig cfg = cache_config(/*kept=*/1);
  cfg.per_seq_min_reuse = 0;
  make(/*n_batch=*/64, /*n_ctx=*/4 * 256, /*n_seq=*/4, cfg, /*per_seq=*/true);
  const char* questions[] = {"aaaa", "bbbb", "cccc", "dddd"};
  for (int i = 0; i < 4; ++i) {
    submit(1 + i, kShared + questions[i], 2);
    run_until_idle();
    EXPECT_EQ(out_[1 + i].text, expected(100 + questions[i][0], 2));
  }
  EXPECT_EQ(metrics_.prefix_hits_total.load(), 3u) << "every later request reused the prefix";
  EXPECT_EQ(metrics_.prefix_adopted_total.load(), 3u) << "each in the stream that held it";
  EXPECT_EQ(decoder_->shared_tokens_, 0);
  EXPECT_EQ(metrics_.prefix_evictions_total.load(), 0u);
  EXPECT_EQ(metrics_.prefix_host_snapshots.load(), 0);
  EXPECT_TRUE(decoder_->prepared_saves_.empty()) << "no host memory readied for a copy that never comes";
}

// Per-sequence KV: a host snapshot hit is restored into the requesting session's own stream (no id
// of the cache's), and the snapshot stays in host memory for the next.
TEST_F(SchedulerTest, PerSequenceKvRestoresAHostSnapshotIntoTheSessionsOwnStream) {
  SchedulerConfig cfg = cache_config(/*kept=*/2);
  cfg.per_seq_min_reuse = 0;
  make(/*n_batch=*/64, /*n_ctx=*/2 * 256, /*n_seq=*/2, cfg, /*per_seq=*/true);
  submit(1, kShared + "aaaa", 2);
  submit(2, kShared + "bbbb", 8);  // follows 1: 1's entry served a hit
  run_until_idle();
  ASSERT_EQ(metrics_.prefix_kept_sequences.load(), 2);
  submit(3, std::string(40, 'q'), 2);  // both ids are kept streams: 1's goes to host memory,
  submit(4, std::string(40, 'r'), 2);  // 2's (never reused) is dropped
  run_until_idle();
  ASSERT_EQ(metrics_.prefix_host_snapshots.load(), 1);
  const std::uint64_t reused_before = metrics_.prefix_reused_tokens_total.load();
  submit(5, kShared + "cccc", 3);
  run_until_idle();
  EXPECT_EQ(out_[5].text, expected(100 + 'c', 3));
  EXPECT_EQ(metrics_.prefix_reused_tokens_total.load() - reused_before, 81u) << "BOS + the shared prefix, from host memory";
  EXPECT_EQ(metrics_.prefix_host_snapshots.load(), 1) << "the snapshot stays for the next";
  submit(6, kShared + "dddd", 3);  // 5's stream now holds the prefix: taken over
  run_until_idle();
  EXPECT_EQ(out_[6].text, expected(100 + 'd', 3));
  EXPECT_EQ(metrics_.prefix_reused_tokens_total.load() - reused_before, 2 * 81u);
}

TEST_F(SchedulerTest, KeptSequencesGiveTheirIdsBackToWaitingRequests) {
  make(64, 4096, /*n_seq=*/2, cache_config(/*kept=*/4));
  submit(1, std::string(40, 'a'), 2);
  run_until_idle();
  submit(2, std::string(40, 'b'), 2);
  run_until_idle();
  EXPECT_EQ(metrics_.prefix_kept_sequences.load(), 2) << "both sequence ids are kept";
  submit(3, std::string(40, 'c'), 2);  // needs an id: one kept sequence gives its own back
  run_until_idle();
  EXPECT_EQ(out_[3].text, expected(100 + 'c', 2));
}

TEST_F(SchedulerTest, ACollidingHashNeverServesAnotherPromptsKv) {
  SchedulerConfig cfg = cache_config();
  cfg.prefix.hash = [](std::uint64_t, std::span<const Token>) -> std::uint64_t { return 7; };
  make(64, 4096, 8, cfg);
  submit(1, std::string(80, 'x') + "aaaa", 4);
  run_until_idle();
  submit(2, std::string(80, 'y') + "aaaa", 4);  // every block "matches" by hash, no token does
  run_until_idle();
  EXPECT_EQ(out_[2].text, expected(100 + 'a', 4));
  EXPECT_EQ(metrics_.prefix_reused_tokens_total.load(), 0u);
  EXPECT_EQ(decoder_->shared_tokens_, 0);
  submit(3, std::string(80, 'x') + "bbbb", 4);  // a real match still works
  run_until_idle();
  EXPECT_EQ(metrics_.prefix_reused_tokens_total.load(), 81u);
}

TEST_F(SchedulerTest, PrefixCacheOffNeverShares) {
  SchedulerConfig cfg = cache_config();
  cfg.prefix.enabled = false;
  make(64, 4096, 8, cfg);
  submit(1, kShared + "aaaa", 4);
  run_until_idle();
  submit(2, kShared + "bbbb", 4);
  run_until_idle();
  EXPECT_EQ(decoder_->shared_tokens_, 0);
  EXPECT_EQ(decoder_->total_kv(), 0);
  EXPECT_EQ(metrics_.prefix_lookups_total.load(), 0u);
}

}  // namespace
}  // namespace uma
