#include "runtime/kv_host_pool.h"

namespace uma {

std::shared_ptr<KvHostPool> KvHostPool::make(store::HostAllocator allocate, std::uint64_t retain_bytes) {
  return std::shared_ptr<KvHostPool>(new KvHostPool(std::move(allocate), retain_bytes));
}

namespace {
std::uint64_t pages_for(std::size_t bytes) { return (bytes + 4095) / 4096 * 4096; }  // the allocator's unit
}  // namespace

KvHostPool::~KvHostPool() {
  if (preparing_.joinable()) preparing_.join();
  for (auto& [size, block] : free_) {
    if (block.release) block.release();
  }
}

HostBytes KvHostPool::take(std::size_t bytes) {
  if (bytes == 0) return HostBytes::heap(0);
  const std::uint64_t pages = pages_for(bytes);
  store::HostMemory block;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (const auto it = fitting(pages); it != free_.end()) {
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

std::multimap<std::uint64_t, store::HostMemory>::iterator KvHostPool::fitting(std::uint64_t pages) {
  const auto it = free_.lower_bound(pages);
  return it != free_.end() && it->first <= pages + pages / 4 ? it : free_.end();
}

void KvHostPool::prepare(std::size_t bytes) {
  if (bytes == 0) return;
  const std::uint64_t pages = pages_for(bytes);
  std::lock_guard<std::mutex> one_at_a_time(prepare_mu_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (prepare_running_ || fitting(pages) != free_.end() || free_bytes_ + pages > retain_bytes_) return;
    prepare_running_ = true;
  }
  if (preparing_.joinable()) preparing_.join();  // finished: prepare_running_ was false
  preparing_ = std::thread([this, pages] {
    store::HostMemory block = allocate_(pages);
    std::lock_guard<std::mutex> lock(mu_);
    prepare_running_ = false;
    if (block.data == nullptr) return;
    free_bytes_ += block.size;
    free_.emplace(block.size, std::move(block));
  });
}

void KvHostPool::wait_prepared() {
  std::lock_guard<std::mutex> one_at_a_time(prepare_mu_);
  if (preparing_.joinable()) preparing_.join();
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
