#include "sched/prefix_cache.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>

namespace uma {

PrefixCache::PrefixCache(Decoder& decoder, ServerMetrics& metrics, const PrefixCacheConfig& config,
                         const TimeSource& time, SeqIdPool& ids)
    : decoder_(decoder), metrics_(metrics), time_(time), ids_(ids), config_(config), index_(config.block, config.hash) {
  index_.set_observer(config.block_observer);
}

void PrefixCache::add_live(RequestId id, std::span<const Token> prompt) {
  if (config_.enabled) index_.insert(id | kLiveBit, prompt);
}

void PrefixCache::remove_live(RequestId id) { index_.erase(id | kLiveBit); }

PrefixCache::Hit PrefixCache::lookup(std::span<const Token> prompt, std::int32_t max_length,
                                     const std::function<bool(RequestId)>& live_ok,
                                     std::int32_t cells_free) {
  if (!config_.enabled) return {};
  ++clock_;
  const auto usable = [&](std::uint64_t id) { return (id & kLiveBit) ? live_ok(id & ~kLiveBit) : true; };
  // Among equally long matches, cells already in the KV cache need neither waiting nor a restore.
  const auto in_kv = [&](std::uint64_t id) { return !(id & kLiveBit) && kept_.at(id).seq >= 0; };
  const PrefixIndex::Match m = index_.find(prompt, max_length, usable, in_kv);
  if (m.length == 0) return {};
  if (m.length < config_.min_reuse && !(in_place_ && in_kv(m.id))) return {};
  if (m.id & kLiveBit) return {Hit::Kind::kLive, m.id & ~kLiveBit, -1, 0, m.length};
  Kept& k = kept_.at(m.id);
  k.last_used = clock_;
  k.used_at = time_.now();
  k.hits++;
  k.served = std::max(k.served, m.length);
  if (in_place_) {  // a kept stream is taken over (nothing to ready host memory for), a snapshot restored
    if (k.seq >= 0) return {Hit::Kind::kKept, 0, k.seq, 0, m.length};
    return {Hit::Kind::kHost, 0, -1, m.id, m.length};
  }
  prepare_if_worth(m.id);
  if (k.seq < 0) {
    // A host snapshot: bring it back into the KV cache (all of it: a snapshot restores whole).
    const auto n = static_cast<std::int32_t>(index_.tokens(m.id).size());
    if (kept_in_kv() >= config_.max_kept) {
      if (const std::uint64_t v = victim(); v != 0) evict_one(v);
    }
    if (ids_.empty() || n > cells_free) return {};
    const std::int32_t seq = ids_.take();
    const Clock::time_point t0 = Clock::now();
    const Status st = decoder_.restore_kv(seq, k.snapshot);
    spdlog::debug("prefix cache: snapshot of {} tokens restored in {:.2f} ms", n,
                  ms_between(t0, Clock::now()));
    if (!st.ok()) {
      spdlog::warn("prefix cache: snapshot of {} tokens did not fit back: {}", n, st.message());
      ids_.give_back(seq);
      return {};
    }
    drop_host(m.id);
    k.seq = seq;
    k.cells = n;
    cells_ += n;
    publish();
  }
  return {Hit::Kind::kKept, 0, k.seq, 0, m.length};
}

std::int32_t PrefixCache::adopt(std::int32_t seq) {
  for (auto it = kept_.begin(); it != kept_.end(); ++it) {
    if (it->second.seq != seq) continue;
    cells_ -= it->second.cells;
    index_.erase(it->first);
    kept_.erase(it);
    metrics_.prefix_adopted_total++;
    publish();
    return seq;
  }
  std::abort();  // not a kept entry's sequence: a bug in the caller
}

std::int32_t PrefixCache::restore_into(const Hit& hit, std::int32_t seq) {
  const auto it = kept_.find(hit.entry);
  if (hit.kind != Hit::Kind::kHost || it == kept_.end() || it->second.seq >= 0) return 0;
  const Clock::time_point t0 = Clock::now();
  const Status st = decoder_.restore_kv(seq, it->second.snapshot);
  if (!st.ok()) {
    spdlog::debug("prefix cache: snapshot not restored into sequence {}: {}", seq, st.message());
    return 0;
  }
  decoder_.trim_sequence(seq, hit.length);
  spdlog::debug("prefix cache: snapshot restored into sequence {} in {:.2f} ms, {} tokens reused", seq,
                ms_between(t0, Clock::now()), hit.length);
  return hit.length;
}

std::int32_t PrefixCache::reusable(std::span<const Token> prompt, std::int32_t max_length,
                                   const std::function<bool(RequestId)>& live_ok) const {
  if (!config_.enabled) return 0;
  const auto in_kv = [&](std::uint64_t id) { return (id & kLiveBit) ? live_ok(id & ~kLiveBit) : kept_.at(id).seq >= 0; };
  const std::int32_t n = index_.find(prompt, max_length, in_kv).length;
  return n < config_.min_reuse ? 0 : n;
}

void PrefixCache::count(std::int32_t prompt_tokens, std::int32_t reused) {
  if (!config_.enabled) return;
  metrics_.prefix_lookups_total++;
  metrics_.prefix_lookup_tokens_total += static_cast<std::uint64_t>(prompt_tokens);
  if (reused > 0) {
    metrics_.prefix_hits_total++;
    metrics_.prefix_reused_tokens_total += static_cast<std::uint64_t>(reused);
  }
}

bool PrefixCache::keep(std::int32_t seq, std::span<const Token> kv_tokens, std::int32_t shared, std::uint32_t led) {
  const auto n = static_cast<std::int32_t>(kv_tokens.size());
  // In place any kept length is reusable (taking the stream over copies nothing); min_reuse bounds copies.
  if (!config_.enabled || config_.max_kept <= 0 || n < std::max(config_.block, in_place_ ? 0 : config_.min_reuse)) return false;
  const auto in_kv = [&](std::uint64_t id) { return !(id & kLiveBit) && kept_.at(id).seq >= 0; };
  const PrefixIndex::Match same = index_.find(kv_tokens, n, in_kv);
  if (same.length == n) {  // an entry already holds all of these tokens
    kept_.at(same.id).last_used = ++clock_;
    kept_.at(same.id).used_at = time_.now();
    kept_.at(same.id).hits += 1 + led;
    kept_.at(same.id).served = std::max(kept_.at(same.id).served, n);
    prepare_if_worth(same.id);
    return false;
  }
  if (config_.keep_unseen_min > 0 && n < config_.keep_unseen_min && starts_with(kv_tokens) < 2) {
    metrics_.prefix_not_kept_total++;
    return false;
  }
  while (kept_in_kv() >= config_.max_kept) {
    const std::uint64_t v = victim();
    if (v == 0) return false;
    evict_one(v);
  }
  decoder_.drop_sampler(seq);
  const std::uint64_t id = next_id_++;
  index_.insert(id, kv_tokens);
  // Cells shared from another sequence are counted there.
  const std::int32_t own = n - std::min(shared, n);
  // Followers shared some prefix of it (how much is not tracked): count all of it as served.
  kept_[id] = Kept{seq, own, {}, ++clock_, time_.now(), led, led > 0 ? n : 0};
  cells_ += own;
  prepare_if_worth(id);
  publish();
  return true;
}

void PrefixCache::note_start(std::span<const Token> prompt) {
  if (!config_.enabled || prompt.size() < static_cast<std::size_t>(config_.block)) return;
  const std::uint64_t h = config_.hash(0, prompt.first(static_cast<std::size_t>(config_.block)));
  auto [it, inserted] = seen_.try_emplace(h, 0);
  it->second++;
  if (!inserted) return;
  seen_order_.push_back(h);
  if (seen_order_.size() > kSeenMax) {
    seen_.erase(seen_order_.front());
    seen_order_.pop_front();
  }
}

std::uint32_t PrefixCache::starts_with(std::span<const Token> tokens) const {
  if (tokens.size() < static_cast<std::size_t>(config_.block)) return 0;
  const auto it = seen_.find(config_.hash(0, tokens.first(static_cast<std::size_t>(config_.block))));
  return it == seen_.end() ? 0 : it->second;
}

std::uint64_t PrefixCache::victim() const {
  std::uint64_t best = 0;
  bool best_leaf = false;
  std::uint64_t best_used = 0;
  for (const auto& [id, e] : kept_) {
    if (e.seq < 0) continue;
    // A leaf: no other kept entry extends its tokens (an inner entry's cells are shared by those).
    const std::span<const Token> mine = index_.tokens(id);
    bool leaf = true;
    for (const auto& [other, o] : kept_) {
      if (other == id || o.seq < 0) continue;
      const std::span<const Token> theirs = index_.tokens(other);
      if (theirs.size() > mine.size() && std::equal(mine.begin(), mine.end(), theirs.begin())) {
        leaf = false;
        break;
      }
    }
    if (best == 0 || (leaf && !best_leaf) || (leaf == best_leaf && e.last_used < best_used)) {
      best = id;
      best_leaf = leaf;
      best_used = e.last_used;
    }
  }
  return best;
}

void PrefixCache::evict_one(std::uint64_t id) {
  Kept& k = kept_.at(id);
  metrics_.prefix_evictions_total++;
  const std::size_t bytes = decoder_.kv_state_bytes(k.seq);
  bool saved = false;
  if (worth_host_memory(id) && bytes <= config_.host_bytes) {
    // Make room among the host snapshots, least recently used first.
    while (host_bytes_ + bytes > config_.host_bytes) {
      std::uint64_t oldest = 0;
      for (const auto& [hid, h] : kept_) {
        if (h.seq < 0 && (oldest == 0 || h.last_used < kept_.at(oldest).last_used)) oldest = hid;
      }
      if (oldest == 0) break;
      drop_host(oldest);
      index_.erase(oldest);
      kept_.erase(oldest);
    }
    const Clock::time_point t0 = Clock::now();
    saved = host_bytes_ + bytes <= config_.host_bytes && decoder_.save_kv(k.seq, k.snapshot).ok();
    spdlog::debug("prefix cache: entry of {} cells (sequence {}) {} host memory in {:.2f} ms ({} bytes)", k.cells, k.seq,
                  saved ? "copied to" : "not copied to",
                  ms_between(t0, Clock::now()), bytes);
  } else {
    spdlog::debug("prefix cache: entry of {} cells (sequence {}) dropped", k.cells, k.seq);
  }
  decoder_.end_sequence(k.seq);
  ids_.give_back(k.seq);
  cells_ -= k.cells;
  k.seq = -1;
  k.prepared = false;  // back in the KV cache, it is judged again
  k.cells = 0;
  if (saved) {
    host_bytes_ += k.snapshot.size();
    if (config_.save_leaves) {
      // Host snapshots this one extends serve nothing it does not.
      std::vector<std::uint64_t> redundant;
      for (const auto& [hid, h] : kept_) {
        if (h.seq < 0 && hid != id && extends(id, hid)) redundant.push_back(hid);
      }
      for (std::uint64_t hid : redundant) {
        drop_host(hid);
        index_.erase(hid);
        kept_.erase(hid);
      }
    }
  } else {
    index_.erase(id);
    kept_.erase(id);
  }
  publish();
}

bool PrefixCache::extends(std::uint64_t longer, std::uint64_t shorter) const {
  const std::span<const Token> a = index_.tokens(longer), b = index_.tokens(shorter);
  return a.size() > b.size() && std::equal(b.begin(), b.end(), a.begin());
}

std::int32_t PrefixCache::common_prefix(std::uint64_t a, std::uint64_t b) const {
  const std::span<const Token> x = index_.tokens(a), y = index_.tokens(b);
  const auto n = std::min(x.size(), y.size());
  return static_cast<std::int32_t>(std::mismatch(x.begin(), x.begin() + static_cast<std::ptrdiff_t>(n), y.begin()).first -
                                   x.begin());
}

void PrefixCache::prepare_if_worth(std::uint64_t id) {
  // Host memory is readied (page-locked, off this thread) only for an entry that eviction would
  // copy there: page-locking holds the GPU's driver while it runs (an 8B's 3000-token entry, 400 MB:
  // 136-160 ms during which a decode's KV copy waited, docs/BENCHMARKS.md), for nothing where
  // another entry holds the prefix and this one would be dropped.
  Kept& k = kept_.at(id);
  if (k.seq < 0 || k.prepared || k.hits == 0 || !worth_host_memory(id)) return;
  k.prepared = true;
  const Clock::time_point t0 = Clock::now();
  decoder_.prepare_save(k.seq);
  spdlog::debug("prefix cache: host memory readied for an entry of {} cells in {:.2f} ms", k.cells,
                ms_between(t0, Clock::now()));
}

bool PrefixCache::worth_host_memory(std::uint64_t id) const {
  if (!config_.save_leaves) {
    // An entry that served hits, unless another one kept (in KV or host memory) holds every prefix
    // it served: requests with one system prompt and different questions each leave an entry, and
    // copying each out (400 MB for 3000 tokens of an 8B, 300 ms on a GPU host) bought nothing.
    const Kept& k = kept_.at(id);
    if (k.hits == 0) return false;
    return std::none_of(kept_.begin(), kept_.end(),
                        [&](const auto& kv) { return kv.first != id && common_prefix(kv.first, id) >= k.served; });
  }
  return std::none_of(kept_.begin(), kept_.end(), [&](const auto& kv) { return kv.first != id && extends(kv.first, id); });
}

bool PrefixCache::evict_one() {
  const std::uint64_t v = victim();
  if (v == 0) return false;
  evict_one(v);
  return true;
}

std::int32_t PrefixCache::evict(std::int32_t cells_needed) {
  std::int32_t released = 0;
  while (released < cells_needed) {
    const std::uint64_t v = victim();
    if (v == 0) break;
    released += kept_.at(v).cells;
    evict_one(v);
  }
  return released;
}

void PrefixCache::drop_host(std::uint64_t id) {
  Kept& k = kept_.at(id);
  host_bytes_ -= k.snapshot.size();
  k.snapshot.clear();
}

void PrefixCache::offload_idle(Clock::time_point now) {
  if (!config_.enabled) return;
  std::vector<std::uint64_t> idle;
  for (const auto& [id, k] : kept_) {
    if (k.seq >= 0 && ms_between(k.used_at, now) > config_.idle_ms) idle.push_back(id);
  }
  for (std::uint64_t id : idle) evict_one(id);
}

bool PrefixCache::holds(std::int32_t seq) const {
  return std::any_of(kept_.begin(), kept_.end(), [seq](const auto& kv) { return kv.second.seq == seq; });
}

std::int32_t PrefixCache::kept_between(std::int32_t lo, std::int32_t hi) const {
  std::int32_t best = -1;
  for (const auto& [id, k] : kept_) {
    if (k.seq > lo && k.seq < hi && (best < 0 || k.seq < best)) best = k.seq;
  }
  return best;
}

bool PrefixCache::unproven(std::int32_t seq) const {
  for (const auto& [id, k] : kept_) {
    if (k.seq == seq) return k.hits == 0 && unseen(index_.tokens(id));
  }
  return false;
}

void PrefixCache::evict_seq(std::int32_t seq) {
  for (const auto& [id, k] : kept_) {
    if (k.seq != seq) continue;
    evict_one(id);  // takes the id by value: the entry is erased
    return;
  }
  std::abort();  // not a kept entry's sequence: a bug in the caller
}

void PrefixCache::relocate(std::int32_t from, std::int32_t to) {
  for (auto& [id, k] : kept_) {
    if (k.seq == from) k.seq = to;
  }
}

void PrefixCache::clear() {
  for (auto& [id, k] : kept_) {
    if (k.seq >= 0) {
      decoder_.end_sequence(k.seq);
      ids_.give_back(k.seq);
    }
  }
  kept_.clear();
  cells_ = 0;
  host_bytes_ = 0;
  publish();
}

std::int32_t PrefixCache::kept_in_kv() const {
  return static_cast<std::int32_t>(std::count_if(kept_.begin(), kept_.end(), [](const auto& kv) { return kv.second.seq >= 0; }));
}

void PrefixCache::publish() {
  const std::int32_t in_kv = kept_in_kv();
  metrics_.prefix_kept_sequences = in_kv;
  metrics_.prefix_host_snapshots = static_cast<std::int64_t>(kept_.size()) - in_kv;
  metrics_.prefix_kept_cells = cells_;
  metrics_.prefix_host_bytes = static_cast<std::int64_t>(host_bytes_);
}

}  // namespace uma
