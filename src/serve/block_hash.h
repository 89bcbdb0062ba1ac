// Block hashes: the keys of a prompt's KV, the same on every side. A prompt's tokens are cut into
// blocks of kBlockTokens; block i's key is a hash chained over blocks 0..i from chain 0. An agent's
// prefix index (sched/prefix_index.h) keys kept KV by them, its KV-event stream
// (cluster/kv_events.h) publishes them, and a gateway hashes a prompt alike to know which agent
// holds how much of it (the stream's snapshot names its block size; a gateway uses no other).
// Pure functions: thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "serve/token.h"

namespace uma {

inline constexpr std::int32_t kBlockTokens = 32;

using BlockHashFn = std::uint64_t (*)(std::uint64_t chain, std::span<const Token> block);
// FNV-1a over the chain value and the block's token ids, then splitmix64's finaliser.
std::uint64_t block_hash(std::uint64_t chain, std::span<const Token> block);
// The chained hashes of `tokens`' whole blocks of `block` tokens (a partial last block has none).
std::vector<std::uint64_t> chained_block_hashes(std::span<const Token> tokens, std::int32_t block = kBlockTokens,
                                                BlockHashFn hash = &block_hash);

// Hears which chained block hashes an index starts and stops holding. Called on the index owner's
// thread (the compute thread), inside its insert()/erase(): keep it short.
class BlockObserver {
 public:
  virtual ~BlockObserver() = default;
  virtual void blocks_changed(std::span<const std::uint64_t> stored, std::span<const std::uint64_t> evicted) = 0;
};

}  // namespace uma
