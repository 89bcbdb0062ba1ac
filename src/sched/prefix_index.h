// PrefixIndex: finds the longest cached prefix of a prompt among token sequences whose KV can be
// reused (live sessions, finished sequences kept in the KV cache, host snapshots).
//
// Tokens are cut into blocks of `block` tokens; block i is keyed by a chained hash of blocks
// 0..i, so one lookup per block walks down the shared prefix. A hit is then confirmed by comparing
// the tokens themselves, and extended token by token past the last whole block: a hash collision
// can cost a lookup, never serve another prompt's KV. The hash is injectable so tests can force
// collisions.
// Blocks are keyed as serve/block_hash.h says. The BlockObserver hears which chained block hashes
// the index starts and stops holding (a hash held by several entries is stored once and evicted
// when the last goes).
// Not thread-safe; owned by the scheduler. Entries are identified by the caller's ids.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <unordered_map>
#include <vector>

#include "serve/block_hash.h"
#include "serve/token.h"

namespace uma {

class PrefixIndex {
 public:
  using EntryId = std::uint64_t;
  using Hash = BlockHashFn;
  explicit PrefixIndex(std::int32_t block = kBlockTokens, Hash hash = &block_hash) : block_(block), hash_(hash) {}

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

 private:
  std::int32_t block_;
  Hash hash_;
  BlockObserver* observer_ = nullptr;
  std::unordered_map<EntryId, std::vector<Token>> entries_;
  // chained hash of blocks 0..i -> entries holding that many whole blocks with that hash
  std::unordered_multimap<std::uint64_t, EntryId> by_hash_;
};

}  // namespace uma
