#include "runtime/kv_host_pool.h"

#include <iterator>
#include <map>

namespace uma {

namespace {
std::uint64_t pages_for(std::size_t bytes) { return (bytes + 4095) / 4096 * 4096; }  // the allocators' unit
}  // namespace

// One page-locked block and its free ranges (offset -> length), first fit. Shared by the pool and
// every snapshot cut from it: the block goes back to the allocator with the last of them.
struct KvHostPool::Arena {
  explicit Arena(store::HostMemory m) : block(std::move(m)) { free[0] = block.size; }
  ~Arena() {
    if (block.release) block.release();
  }
  std::uint8_t* cut(std::uint64_t n) {
    std::lock_guard<std::mutex> lock(mu);
    for (auto it = free.begin(); it != free.end(); ++it) {
      if (it->second < n) continue;
      const std::uint64_t at = it->first, left = it->second - n;
      free.erase(it);
      if (left > 0) free[at + n] = left;
      free_bytes -= n;
      return block.data + at;
    }
    return nullptr;
  }
  void give_back(std::uint8_t* p, std::uint64_t n) {
    std::lock_guard<std::mutex> lock(mu);
    std::uint64_t at = static_cast<std::uint64_t>(p - block.data);
    free_bytes += n;
    auto next = free.lower_bound(at);
    if (next != free.begin()) {  // merge with the range before
      auto prev = std::prev(next);
      if (prev->first + prev->second == at) {
        at = prev->first;
        n += prev->second;
        free.erase(prev);
      }
    }
    if (next != free.end() && at + n == next->first) {  // and the one after
      n += next->second;
      free.erase(next);
    }
    free[at] = n;
  }
  bool fits(std::uint64_t n) const {
    std::lock_guard<std::mutex> lock(mu);
    for (const auto& [at, len] : free) {
      if (len >= n) return true;
    }
    return false;
  }
  store::HostMemory block;
  mutable std::mutex mu;
  std::map<std::uint64_t, std::uint64_t> free;
  std::uint64_t free_bytes = block.size;
};

std::shared_ptr<KvHostPool> KvHostPool::make(store::HostAllocator allocate, std::uint64_t retain_bytes,
                                             std::uint64_t arena_bytes) {
  std::shared_ptr<KvHostPool> pool(new KvHostPool(std::move(allocate), retain_bytes));
  pool->arena_bytes_ = arena_bytes;
  return pool;
}

void KvHostPool::start_arena() {
  if (arena_started_ || arena_bytes_ == 0) return;
  arena_started_ = true;
  arena_pending_ = true;
  // The destructor joins the thread first.
  arena_thread_ = std::thread([this, n = pages_for(arena_bytes_)] {
    store::HostMemory m = allocate_(n);
    std::shared_ptr<Arena> arena = m.data != nullptr ? std::make_shared<Arena>(std::move(m)) : nullptr;
    std::lock_guard<std::mutex> lock(mu_);
    arena_ = std::move(arena);
    arena_pending_ = false;
  });
}

KvHostPool::~KvHostPool() { wait_prepared(); }

HostBytes KvHostPool::take(std::size_t bytes) {
  if (bytes == 0) return HostBytes::heap(0);
  const std::uint64_t pages = pages_for(bytes);
  std::shared_ptr<Arena> arena;
  {
    std::lock_guard<std::mutex> lock(mu_);
    start_arena();  // for the snapshots after this one
    arena = arena_;
  }
  if (arena) {
    if (std::uint8_t* p = arena->cut(pages)) return HostBytes(p, bytes, [arena, p, pages] { arena->give_back(p, pages); });
  }
  store::HostMemory m = take_(pages);
  if (m.data == nullptr) return HostBytes::heap(bytes);
  return HostBytes(m.data, bytes, std::move(m.release));
}

void KvHostPool::prepare(std::size_t bytes) {
  if (bytes == 0) return;
  const std::uint64_t pages = pages_for(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  start_arena();
  // The arena being page-locked will likely serve it; page-locking more beside it would only
  // hold the driver longer.
  if (arena_pending_ || (arena_ && arena_->fits(pages))) return;
  if (running_ || pool_.has_free(pages)) return;
  if (preparing_.joinable()) preparing_.join();  // finished: running_ is false
  running_ = true;
  preparing_ = std::thread([this, pages] {
    pool_.prefault(pages, pool_.free_bytes() + pages);
    std::lock_guard<std::mutex> done(mu_);
    running_ = false;
  });
}

void KvHostPool::wait_prepared() {
  std::thread t, a;
  {
    std::lock_guard<std::mutex> lock(mu_);
    t = std::move(preparing_);
    a = std::move(arena_thread_);
  }
  if (t.joinable()) t.join();
  if (a.joinable()) a.join();
}

std::uint64_t KvHostPool::arena_free_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!arena_) return 0;
  std::lock_guard<std::mutex> arena_lock(arena_->mu);
  return arena_->free_bytes;
}

}  // namespace uma
