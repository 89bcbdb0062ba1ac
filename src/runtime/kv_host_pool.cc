#include "runtime/kv_host_pool.h"

namespace uma {

std::shared_ptr<KvHostPool> KvHostPool::make(store::HostAllocator allocate, std::uint64_t retain_bytes) {
  return std::shared_ptr<KvHostPool>(new KvHostPool(std::move(allocate), retain_bytes));
}

KvHostPool::~KvHostPool() {
  for (auto& [size, block] : free_) {
    if (block.release) block.release();
  }
}

HostBytes KvHostPool::take(std::size_t bytes) {
  if (bytes == 0) return HostBytes::heap(0);
  const std::uint64_t pages = (bytes + 4095) / 4096 * 4096;  // the allocator's unit
  store::HostMemory block;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = free_.lower_bound(pages);
    if (it != free_.end() && it->first <= pages + pages / 4) {
      block = std::move(it->second);
      free_bytes_ -= it->first;
      free_.erase(it);
    }
  }
  if (block.data == nullptr) {
    block = allocate_(pages);
    if (block.data == nullptr) return HostBytes::heap(bytes);
  }
  std::uint8_t* data = block.data;
  return HostBytes(data, bytes, [pool = shared_from_this(), block]() mutable { pool->give_back(std::move(block)); });
}

void KvHostPool::give_back(store::HostMemory block) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (free_bytes_ + block.size <= retain_bytes_) {
      free_bytes_ += block.size;
      free_.emplace(block.size, std::move(block));
      return;
    }
  }
  if (block.release) block.release();
}

std::uint64_t KvHostPool::retained_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return free_bytes_;
}

}  // namespace uma
