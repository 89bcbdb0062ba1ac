// PrefixIndex: finds the longest cached prefix of a prompt among token sequences whose KV can be
// reused (live sessions, finished sequences kept in the KV cache, host snapshots).
//
// Tokens are cut into blocks of `block` tokens; block i is keyed by a chained hash of blocks
// 0..i, so one lookup per block walks down the shared prefix. A hit is then confirmed by comparing
// the tokens themselves, and extended token by token past the last whole block: a hash collision
// can cost a lookup, never serve another prompt's KV. The hash is injectable so tests can force
// collisions.
// A BlockObserver hears which chained block hashes the index starts and stops holding (a hash held
// by several entries is stored once and evicted when the last goes): the cluster's KV-event
// stream publishes them, and a gateway that hashes a prompt the same way (default_hash, the same
// block size, chain 0 at the start) knows which agent holds how much of it.
// Not thread-safe; owned by the scheduler. Entries are identified by the caller's ids.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <unordered_map>
#include <vector>

#include "runtime/decoder.h"

namespace uma {

// Called on the index owner's thread (the compute thread), inside insert()/erase(): keep it short.
class BlockObserver {
 public:
  virtual ~BlockObserver() = default;
  virtual void blocks_changed(std::span<const std::uint64_t> stored, std::span<const std::uint64_t> evicted) = 0;
};

class PrefixIndex {
 public:
  using EntryId = std::uint64_t;
  using Hash = std::uint64_t (*)(std::uint64_t chain, std::span<const Token> block);
  static std::uint64_t default_hash(std::uint64_t chain, std::span<const Token> block);

  // Tokens per block: an agent's index and a gateway's routing hash prompts alike (the KV-event
  // stream's snapshot says it; a gateway uses no stream of another size).
  static constexpr std::int32_t kBlockTokens = 32;
  explicit PrefixIndex(std::int32_t block = kBlockTokens, Hash hash = &default_hash) : block_(block), hash_(hash) {}

  // Adds (or replaces) an entry whose KV holds `tokens` at positions 0..size-1.
  void insert(EntryId id, std::span<const Token> tokens);
  void erase(EntryId id);
  bool contains(EntryId id) const { return entries_.count(id) != 0; }
  std::size_t size() const { return entries_.size(); }
  std::span<const Token> tokens(EntryId id) const;

  struct Match {
    EntryId id = 0;
    std::int32_t length = 0;  // 0: no match of at least one block
  };
  // The longest prefix of `prompt` (at most max_length tokens) that some entry for which
  // `usable(id)` holds has; among equals, the first `prefer(id)` entry, else any.
  Match find(std::span<const Token> prompt, std::int32_t max_length, const std::function<bool(EntryId)>& usable,
             const std::function<bool(EntryId)>& prefer = nullptr) const;

  std::int32_t block() const { return block_; }
  void set_observer(BlockObserver* observer) { observer_ = observer; }  // null: none; outlives the index

  // The chained hashes of `tokens`' whole blocks (what the index keys them by).
  static std::vector<std::uint64_t> block_hashes(std::span<const Token> tokens, std::int32_t block, Hash hash = &default_hash);

 private:
  std::int32_t block_;
  Hash hash_;
  BlockObserver* observer_ = nullptr;
  std::unordered_map<EntryId, std::vector<Token>> entries_;
  // chained hash of blocks 0..i -> entries holding that many whole blocks with that hash
  std::unordered_multimap<std::uint64_t, EntryId> by_hash_;
};

}  // namespace uma
