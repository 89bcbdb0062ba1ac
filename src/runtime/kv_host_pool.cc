#include "runtime/kv_host_pool.h"

namespace uma {

namespace {
std::uint64_t pages_for(std::size_t bytes) { return (bytes + 4095) / 4096 * 4096; }  // the allocators' unit
}  // namespace

std::shared_ptr<KvHostPool> KvHostPool::make(store::HostAllocator allocate, std::uint64_t retain_bytes) {
  return std::shared_ptr<KvHostPool>(new KvHostPool(std::move(allocate), retain_bytes));
}

KvHostPool::~KvHostPool() { wait_prepared(); }

HostBytes KvHostPool::take(std::size_t bytes) {
  if (bytes == 0) return HostBytes::heap(0);
  store::HostMemory m = take_(pages_for(bytes));
  if (m.data == nullptr) return HostBytes::heap(bytes);
  return HostBytes(m.data, bytes, std::move(m.release));
}

void KvHostPool::prepare(std::size_t bytes) {
  if (bytes == 0) return;
  const std::uint64_t pages = pages_for(bytes);
  std::lock_guard<std::mutex> lock(mu_);
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
  std::thread t;
  {
    std::lock_guard<std::mutex> lock(mu_);
    t = std::move(preparing_);
  }
  if (t.joinable()) t.join();
}

}  // namespace uma
