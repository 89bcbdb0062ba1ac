// PrefixCache: KV of earlier prompts kept for reuse by later requests with the same prefix.
//
// Sources, all found through one PrefixIndex (block hashes, confirmed token by token):
// - live sessions: a request may copy (share) the cells of a running session's prompt prefix,
//   waiting for that session to prefill it if need be;
// - kept sequences: a finished session's sequence stays in the KV cache, without a sampler, as an
//   entry, under the id it ran in. Unified KV: its cells are shared with `llama_memory_seq_cp`,
//   never copied. Per-sequence KV (`in_place`): its stream stays where it is and the next request
//   with that prefix takes the id over (Decoder::adopt_sequence), so keeping costs no memory and
//   no copy: the stream was the session's, and a start that needs the id evicts the entry;
// - host snapshots: under KV pressure (or idle) a kept sequence that has served a hit (one whose
//   served prefixes no other kept entry holds) is evicted
//   to host memory (`llama_state_seq_get_data`, up to host_bytes) and brought back on a hit (unified:
//   into an id of its own, kept again; per-sequence: into the requesting session's stream, the
//   snapshot staying in host memory for the next); one that never did is dropped. Copying out costs the compute thread a GPU->host transfer, and with
//   nothing shared (every prompt different) it would be paid for every request and never repaid
//   (measured on a GPU at 64 streams: 241 snapshots cut 3441 tok/s to 1201).
// Eviction is LRU, leaves first (an entry whose tokens are a prefix of another's goes last).
// Cell accounting is an estimate (an entry counts the cells it did not get shared from another
// sequence, which may outlive that one); the scheduler's recovery from a decode that finds no cells evicts entries first, so an
// estimate that runs short never reaches a client.
// Not thread-safe; owned by the Scheduler, which also owns the sequence ids an entry holds.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <map>
#include <span>
#include <unordered_map>
#include <vector>

#include "metrics/server_metrics.h"
#include "runtime/decoder.h"
#include "sched/prefix_index.h"
#include "serve/request.h"
#include "sched/seq_id_pool.h"
#include "sched/time_source.h"

namespace uma {

struct PrefixCacheConfig {
  bool enabled = false;                               // umad turns it on (--prefix-cache, the default)
  std::int32_t max_kept = 16;                         // sequences kept in the KV cache
  std::size_t host_bytes = std::size_t{256} << 20;    // host snapshots, at most
  std::int32_t block = kBlockTokens;     // index block, tokens
  // Shortest prefix worth reusing. With per-sequence KV every reuse is a copy between KV streams,
  // after which llama.cpp reserves its worst-case graph again (measured on a GPU: ~15-25 ms of
  // host time in the next decode), more than the GPU needs to prefill a few hundred tokens.
  std::int32_t min_reuse = 0;
  // Admission: a finished sequence is kept when another request began with the same first block
  // (seen more than once: a shared system prompt, a chat's next turn), or when it is at least this
  // long. With per-sequence KV, keeping is a copy between streams (the cost above): with nothing
  // shared it would be paid for every request and never repaid. 0: keep every finished sequence
  // (a unified KV keeps it where it is, for free).
  std::int32_t keep_unseen_min = 0;
  // A kept sequence not used for this long moves to host memory: in a unified KV every decode's
  // attention spans all used cells, so idle cells slow every running stream down.
  double idle_ms = 2000.0;
  // Host memory admission. By default an entry goes to host memory when it served a hit (or
  // followers while it ran). With `save_leaves`, every leaf goes instead (an entry no other kept
  // entry extends; one that another extends is redundant, since whatever matches it matches as
  // much of the longer one), and host snapshots the saved one extends are dropped: a chat keeps
  // its latest turn, a group its prefix, whether or not they were reused yet. Unified KV (CPU) sets
  // it: its idle offload runs every 2 s, a chat's next turn or a group's next user comes later
  // than that, and the copy is a memcpy next to seconds of prefill. Per-sequence KV (GPU) copies
  // device to host on the compute thread, for every request with nothing shared (see
  // docs/ARCHITECTURE.md), and keeps the default.
  bool save_leaves = false;
  PrefixIndex::Hash hash = &block_hash;  // tests inject a weak one
  BlockObserver* block_observer = nullptr;  // hears the block hashes held (umad --agent's KV events)
};

class PrefixCache {
 public:
  // `ids`: the pool kept entries take their sequence ids from and give them back to (KvLedger's).
  PrefixCache(Decoder& decoder, ServerMetrics& metrics, const PrefixCacheConfig& config, const TimeSource& time,
              SeqIdPool& ids);

  bool enabled() const { return config_.enabled; }

  // A running session's prompt is a source while it runs.
  void add_live(RequestId id, std::span<const Token> prompt);
  void remove_live(RequestId id);

  struct Hit {
    enum class Kind : std::uint8_t { kNone, kLive, kKept, kHost } kind = Kind::kNone;
    RequestId leader = 0;     // kLive
    std::int32_t seq = -1;    // kKept: the sequence to share cells from (in place: to adopt)
    std::uint64_t entry = 0;  // kHost: the snapshot to restore (restore_into)
    std::int32_t length = 0;  // tokens reusable
  };
  // The longest reusable prefix of `prompt`, at most max_length tokens. `live_ok(id)` says whether
  // a live session may lead (it is prefilling or decoding). A host snapshot hit is, unified,
  // restored into one of the cache's ids first (and becomes a kept entry) when room allows; in
  // place, answered kHost for restore_into. min_reuse bounds every hit but an in-place kept one
  // (taking a stream over copies nothing).
  Hit lookup(std::span<const Token> prompt, std::int32_t max_length, const std::function<bool(RequestId)>& live_ok,
             std::int32_t cells_free);
  // In place: the kept entry in `seq` (a kKept hit) leaves the cache, and its id with it: the
  // caller now holds the id and its KV. Returns seq.
  std::int32_t adopt(std::int32_t seq);
  // In place: a kHost hit's snapshot into the empty, started sequence `seq`, cut to the hit's
  // length. Returns the tokens reused (0 when it did not fit back: the sequence is then empty).
  std::int32_t restore_into(const Hit& hit, std::int32_t seq);
  // Without side effects: how many of `prompt`'s first max_length tokens could share cells that
  // are in the KV cache now (a usable live session's prompt, or a kept sequence; not a host
  // snapshot, which would need cells to come back). What admission may discount.
  std::int32_t reusable(std::span<const Token> prompt, std::int32_t max_length,
                        const std::function<bool(RequestId)>& live_ok) const;
  // Counts a lookup's outcome (tokens reused out of prompt_tokens).
  void count(std::int32_t prompt_tokens, std::int32_t reused);

  // A finished session's sequence holding `kv_tokens` at positions 0.., the first `shared` of them
  // in cells shared from another sequence: kept (the cache takes the sequence id; returns true) or
  // not (the caller frees it). May evict to stay within max_kept. `led`: requests that shared its
  // prompt while it ran; they count as hits (a prefix that served others is worth host memory:
  // a group's users arriving together follow one leader, and without this the prefix they all
  // share would be dropped at the first idle offload, however often it comes back).
  bool keep(std::int32_t seq, std::span<const Token> kv_tokens, std::int32_t shared, std::uint32_t led = 0);
  void set_min_reuse(std::int32_t n) { config_.min_reuse = n; }
  void set_keep_unseen_min(std::int32_t n) { config_.keep_unseen_min = n; }
  void set_save_leaves(bool on) { config_.save_leaves = on; }
  void set_in_place(bool on) { in_place_ = on; }
  bool in_place() const { return in_place_; }
  // Kept entries in the KV cache (each holds a sequence id a start may evict it for).
  std::int32_t kept_in_kv() const;
  // Counts a started request's first block, for keep()'s admission (a bounded, forgetting count).
  void note_start(std::span<const Token> prompt);
  // KV cells the kept entries hold (estimate, see above).
  std::int32_t cells() const { return cells_; }
  // Evicts kept entries until `cells_needed` cells are released or none is left; their sequence
  // ids go back to the cache's pool. Returns the cells released.
  std::int32_t evict(std::int32_t cells_needed);
  // Evicts the one best victim (a waiting request needs a sequence id); false when none is kept.
  bool evict_one();
  bool holds(std::int32_t seq) const;
  // The lowest sequence in (lo, hi) a kept entry holds, or -1.
  std::int32_t kept_between(std::int32_t lo, std::int32_t hi) const;
  // Whether the kept entry in `seq` has shown no reuse yet: it served no hit and no other request
  // began with its first block. Such a stream is dropped rather than moved (a move costs a copy
  // and a new worst-case graph) when it lies between running ones.
  bool unproven(std::int32_t seq) const;
  // Whether no request but one began with these tokens' first block (note_start).
  bool unseen(std::span<const Token> tokens) const { return starts_with(tokens) < 2; }
  // Frees the kept entry in `seq` as an eviction would, its id back to the pool.
  void evict_seq(std::int32_t seq);
  // The kept entry in `from` now lives in `to` (the caller moved its KV and holds both ids).
  void relocate(std::int32_t from, std::int32_t to);
  // Moves kept sequences idle for longer than idle_ms out of the KV cache (to host memory when it
  // fits). Called every tick.
  void offload_idle(Clock::time_point now);
  // Frees every kept sequence (shutdown).
  void clear();

 private:
  struct Kept {
    std::int32_t seq = -1;        // >= 0: in the KV cache; -1: host snapshot in `snapshot`
    std::int32_t cells = 0;       // cells counted for it while in the KV cache
    HostBytes snapshot;
    std::uint64_t last_used = 0;
    Clock::time_point used_at{};
    std::uint32_t hits = 0;       // lookups it served: only an entry reused once is worth host memory
    std::int32_t served = 0;      // the longest prefix it served
    bool prepared = false;        // host memory was readied for its snapshot (Decoder::prepare_save)
  };
  static constexpr std::uint64_t kLiveBit = std::uint64_t{1} << 63;

  void evict_one(std::uint64_t id);
  bool worth_host_memory(std::uint64_t id) const;
  void prepare_if_worth(std::uint64_t id);  // Decoder::prepare_save once, for an entry worth host memory
  bool extends(std::uint64_t longer, std::uint64_t shorter) const;  // strictly, token for token
  std::int32_t common_prefix(std::uint64_t a, std::uint64_t b) const;  // tokens the two entries share
  std::uint64_t victim() const;  // LRU kept-in-KV entry, leaves first; 0: none
  void drop_host(std::uint64_t id);
  void publish();

  std::uint32_t starts_with(std::span<const Token> tokens) const;  // note_start()s of its first block

  Decoder& decoder_;
  ServerMetrics& metrics_;
  const TimeSource& time_;
  SeqIdPool& ids_;
  PrefixCacheConfig config_;
  bool in_place_ = false;  // per-sequence KV: kept streams are taken over, host hits restored into the session's
  PrefixIndex index_;
  std::map<std::uint64_t, Kept> kept_;  // by entry id (no kLiveBit)
  std::uint64_t next_id_ = 1;
  std::uint64_t clock_ = 0;
  std::int32_t cells_ = 0;
  std::size_t host_bytes_ = 0;
  // First-block hash -> starts seen, the last kSeenMax distinct ones (oldest forgotten first).
  static constexpr std::size_t kSeenMax = 4096;
  std::unordered_map<std::uint64_t, std::uint32_t> seen_;
  std::deque<std::uint64_t> seen_order_;
};

}  // namespace uma
