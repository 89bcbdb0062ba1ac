#include "store/host_pool.h"

#include <cstring>

namespace uma::store {

HostPool::HostPool(HostAllocator base, std::uint64_t keep_bytes) : st_(std::make_shared<State>()) {
  st_->base = base ? std::move(base) : allocate_shared;
  st_->keep_bytes = keep_bytes;
}

std::size_t HostPool::best_fit(const State& st, std::uint64_t bytes) {
  std::size_t best = st.free.size();
  for (std::size_t i = 0; i < st.free.size(); ++i) {
    const std::uint64_t s = st.free[i].size;
    if (s >= bytes && s <= bytes + bytes / 2 && (best == st.free.size() || s < st.free[best].size)) best = i;
  }
  return best;
}

bool HostPool::has_free(std::uint64_t bytes) const {
  std::lock_guard lock(st_->mu);
  return best_fit(*st_, bytes) < st_->free.size();
}

HostMemory HostPool::take(const std::shared_ptr<State>& st, std::uint64_t bytes) {
  HostMemory m;
  {
    std::lock_guard lock(st->mu);
    const std::size_t best = best_fit(*st, bytes);
    if (best < st->free.size()) {
      m = std::move(st->free[best]);
      st->free.erase(st->free.begin() + static_cast<std::ptrdiff_t>(best));
      st->free_bytes -= m.size;
      ++st->reused;
    }
  }
  if (m.data == nullptr) m = st->base(bytes);
  if (m.data == nullptr) return m;
  // The block's own release is kept aside; the one handed out gives the block back.
  auto real = std::make_shared<HostMemory>(m);
  m.release = [st, real] {
    std::unique_lock lock(st->mu);
    if (st->free_bytes + real->size <= st->keep_bytes) {
      st->free_bytes += real->size;
      st->free.push_back(*real);
      return;
    }
    lock.unlock();
    if (real->release) real->release();
  };
  return m;
}

HostAllocator HostPool::allocator() {
  std::shared_ptr<State> st = st_;
  return [st](std::uint64_t bytes) { return take(st, bytes); };
}

void HostPool::prefault(std::uint64_t bytes, std::uint64_t total) {
  std::vector<HostMemory> blocks;
  while (free_bytes() + bytes <= total && free_bytes() + bytes <= st_->keep_bytes) {
    HostMemory m = st_->base(bytes);
    if (m.data == nullptr) break;
    std::memset(m.data, 0, m.size);
    std::lock_guard lock(st_->mu);
    st_->free_bytes += m.size;
    st_->free.push_back(std::move(m));
  }
}

std::uint64_t HostPool::free_bytes() const {
  std::lock_guard lock(st_->mu);
  return st_->free_bytes;
}

std::uint64_t HostPool::reused() const {
  std::lock_guard lock(st_->mu);
  return st_->reused;
}

}  // namespace uma::store
