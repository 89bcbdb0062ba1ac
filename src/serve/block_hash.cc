#include "serve/block_hash.h"

namespace uma {

std::uint64_t block_hash(std::uint64_t chain, std::span<const Token> block) {
  std::uint64_t h = 1469598103934665603ull ^ chain;
  for (Token t : block) {
    h ^= static_cast<std::uint32_t>(t);
    h *= 1099511628211ull;
  }
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebull;
  return h ^ (h >> 31);
}

std::vector<std::uint64_t> chained_block_hashes(std::span<const Token> tokens, std::int32_t block, BlockHashFn hash) {
  std::vector<std::uint64_t> out;
  std::uint64_t chain = 0;
  for (std::size_t at = 0; block > 0 && at + static_cast<std::size_t>(block) <= tokens.size(); at += static_cast<std::size_t>(block)) {
    chain = hash(chain, tokens.subspan(at, static_cast<std::size_t>(block)));
    out.push_back(chain);
  }
  return out;
}

}  // namespace uma
