#include "sched/prefix_index.h"

#include <algorithm>

namespace uma {

void PrefixIndex::insert(EntryId id, std::span<const Token> tokens) {
  erase(id);
  std::vector<Token>& stored = entries_[id];
  stored.assign(tokens.begin(), tokens.end());
  std::vector<std::uint64_t> fresh;
  for (std::uint64_t chain : chained_block_hashes(stored, block_, hash_)) {
    if (observer_ != nullptr && by_hash_.count(chain) == 0) fresh.push_back(chain);
    by_hash_.emplace(chain, id);
  }
  if (!fresh.empty()) observer_->blocks_changed(fresh, {});
}

void PrefixIndex::erase(EntryId id) {
  auto entry = entries_.find(id);
  if (entry == entries_.end()) return;
  std::vector<std::uint64_t> gone;
  for (std::uint64_t chain : chained_block_hashes(entry->second, block_, hash_)) {
    const auto [lo, hi] = by_hash_.equal_range(chain);
    for (auto it = lo; it != hi; ++it) {
      if (it->second != id) continue;
      by_hash_.erase(it);
      break;
    }
    if (observer_ != nullptr && by_hash_.count(chain) == 0) gone.push_back(chain);
  }
  entries_.erase(entry);
  if (!gone.empty()) observer_->blocks_changed({}, gone);
}

std::span<const Token> PrefixIndex::tokens(EntryId id) const {
  auto it = entries_.find(id);
  if (it == entries_.end()) return {};
  return it->second;
}

PrefixIndex::Match PrefixIndex::find(std::span<const Token> prompt, std::int32_t max_length,
                                     const std::function<bool(EntryId)>& usable,
                                     const std::function<bool(EntryId)>& prefer) const {
  const auto limit = std::min<std::int32_t>(max_length, static_cast<std::int32_t>(prompt.size()));
  // Chained hashes of the prompt's whole blocks, then the deepest block some entry shares.
  std::vector<std::uint64_t> chain;
  std::uint64_t h = 0;
  for (std::int32_t at = 0; at + block_ <= limit; at += block_) {
    h = hash_(h, prompt.subspan(static_cast<std::size_t>(at), static_cast<std::size_t>(block_)));
    chain.push_back(h);
  }
  Match best;
  bool best_preferred = false;
  for (std::size_t blocks = chain.size(); blocks > 0; --blocks) {
    const auto [lo, hi] = by_hash_.equal_range(chain[blocks - 1]);
    for (auto it = lo; it != hi; ++it) {
      const EntryId id = it->second;
      if (!usable(id)) continue;
      const std::vector<Token>& t = entries_.at(id);
      // Confirm: a colliding hash must never count as a match (it may even name an entry shorter
      // than this depth).
      const auto whole = static_cast<std::int32_t>(blocks) * block_;
      if (static_cast<std::int32_t>(t.size()) < whole) continue;
      if (!std::equal(prompt.begin(), prompt.begin() + whole, t.begin())) continue;
      std::int32_t n = whole;
      const auto stop = std::min<std::int32_t>(limit, static_cast<std::int32_t>(t.size()));
      while (n < stop && t[static_cast<std::size_t>(n)] == prompt[static_cast<std::size_t>(n)]) ++n;
      const bool preferred = prefer && prefer(id);
      if (n > best.length || (n == best.length && preferred && !best_preferred)) {
        best = {id, n};
        best_preferred = preferred;
      }
    }
    if (best.length > 0) break;  // deeper blocks were tried first; shallower ones cannot beat this
  }
  return best;
}

}  // namespace uma
