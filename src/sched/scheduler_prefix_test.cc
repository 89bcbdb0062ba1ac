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
  EXPECT_EQ(metrics_.prefix_host_snapshots.load(), 1) << "the reused entry went to host memory, the other was dropped";
  submit(3, kShared + "cccc", 4);  // evicts request 2's sequence; restores 1's snapshot, then shares
  run_until_idle();
  EXPECT_EQ(out_[3].text, expected(100 + 'c', 4));
  EXPECT_EQ(metrics_.prefix_reused_tokens_total.load(), 2 * 81u);
}

// Unified KV offloads idle entries every 2 s; a chat's next turn, or a group's next user, comes
// later. The only copy of a prefix goes to host memory even before anyone reused it; a second
// entry with the same first block, never reused, is dropped (the first copy serves that prefix).
TEST_F(SchedulerTest, AnIdlePrefixsOnlyCopyGoesToHostMemoryAndOthersNeverReusedAreDropped) {
  SchedulerConfig cfg = cache_config();
  cfg.prefix.idle_ms = 5;
  make(64, 4096, 8, cfg);
  submit(1, kShared + "aaaa", 4);
  run_until_idle();
  EXPECT_EQ(metrics_.prefix_kept_sequences.load(), 1);
  clock_.advance(std::chrono::milliseconds(10));
  submit(2, std::string(20, 'z'), 2);  // unrelated work: its first tick offloads the idle entry
  scheduler_->tick(events_);
  collect();
  run_until_idle();
  EXPECT_EQ(metrics_.prefix_host_snapshots.load(), 1) << "never reused, but the only copy of its prefix";
  const std::uint64_t reused_before = metrics_.prefix_reused_tokens_total.load();
  submit(3, kShared + "bbbb", 4);  // a hit on request 1's snapshot, restored
  run_until_idle();
  EXPECT_EQ(out_[3].text, expected(100 + 'b', 4));
  EXPECT_EQ(metrics_.prefix_reused_tokens_total.load() - reused_before, 81u);
  clock_.advance(std::chrono::milliseconds(10));
  submit(4, std::string(20, 'y'), 2);
  scheduler_->tick(events_);
  collect();
  run_until_idle();
  // Request 1's entry (reused now) and request 2's (its own prefix's only copy) are in host
  // memory; request 3's, never reused and sharing request 1's first block, was dropped.
  EXPECT_EQ(metrics_.prefix_host_snapshots.load(), 2);
  EXPECT_EQ(metrics_.prefix_kept_sequences.load(), 1) << "request 4's, not idle yet";
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
  EXPECT_EQ(metrics_.prefix_host_snapshots.load(), 1) << "the reused one; request 11's was dropped";
  run_until_idle();
  submit(3, kShared + "cccc", 4);
  run_until_idle();
  EXPECT_EQ(out_[3].text, expected(100 + 'c', 4));
  EXPECT_EQ(metrics_.prefix_reused_tokens_total.load(), 2 * 81u) << "restored from host memory";
}

// A group's users arriving together: the later ones follow the first (a live hit, no kept entry
// is hit), so neither finished sequence was ever "reused" as a kept entry. The leader's served its
// followers, which counts: it goes to host memory at the idle offload, and the next request of the
// group is a hit instead of a cold prompt.
TEST_F(SchedulerTest, ALeadersSequenceThatServedFollowersIsWorthHostMemory) {
  SchedulerConfig cfg = cache_config();
  cfg.prefix.idle_ms = 5;
  make(/*n_batch=*/16, 4096, 8, cfg);
  submit(1, kShared + "aaaa", 4);
  submit(2, kShared + "bbbb", 4);  // follows request 1 for the shared prefix
  run_until_idle();
  EXPECT_EQ(out_[2].text, expected(100 + 'b', 4));
  EXPECT_EQ(metrics_.prefix_kept_sequences.load(), 2);
  clock_.advance(std::chrono::milliseconds(10));
  submit(3, std::string(20, 'z'), 2);  // unrelated work: its first tick offloads the idle entries
  scheduler_->tick(events_);
  collect();
  EXPECT_EQ(metrics_.prefix_kept_sequences.load(), 0) << "out of the KV cache";
  EXPECT_EQ(metrics_.prefix_host_snapshots.load(), 1) << "the leader's, which served a follower; the follower's was dropped";
  run_until_idle();
  const std::uint64_t reused_before = metrics_.prefix_reused_tokens_total.load();
  submit(4, kShared + "cccc", 4);
  run_until_idle();
  EXPECT_EQ(out_[4].text, expected(100 + 'c', 4));
  EXPECT_EQ(metrics_.prefix_reused_tokens_total.load() - reused_before, 81u) << "restored from host memory";
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
