// KvHostPool: page-locked host memory for KV snapshots (host_bytes.h), kept for reuse.
//
// A snapshot in page-locked memory goes to and from the GPU at the link's rate; one in pageable
// memory goes through the driver's staging copies (an 8B's 3000-token prefix, 400 MB: ~300 ms on
// an H100 host). Page-locking itself costs about as much as such a copy, so a freed block is kept
// (up to `retain_bytes` in all) and handed to the next snapshot that fits it without wasting more
// than a quarter of it. Where no page-locked memory can be had, take() gives heap memory.
// prepare() page-locks a block ahead of need on a thread of its own (one at a time), so the first
// snapshot of a size does not pay for it on the compute thread (136-160 ms for 400 MB on an H100).
// Thread-safe (one mutex): a snapshot may be freed on any thread; the pool lives as long as the
// last snapshot it gave out (each holds a reference), and joins its preparing thread when it goes.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "runtime/host_bytes.h"
#include "store/model_image.h"

namespace uma {

class KvHostPool : public std::enable_shared_from_this<KvHostPool> {
 public:
  static std::shared_ptr<KvHostPool> make(store::HostAllocator allocate, std::uint64_t retain_bytes);
  ~KvHostPool();
  HostBytes take(std::size_t bytes);
  // A block take(bytes) would use is made ready in the background, unless one is or a preparation
  // is under way.
  void prepare(std::size_t bytes);
  void wait_prepared();  // returns once no preparation is under way
  std::uint64_t retained_bytes() const;

 private:
  KvHostPool(store::HostAllocator allocate, std::uint64_t retain_bytes)
      : allocate_(std::move(allocate)), retain_bytes_(retain_bytes) {}
  void give_back(store::HostMemory block);
  std::multimap<std::uint64_t, store::HostMemory>::iterator fitting(std::uint64_t pages);  // under mu_

  store::HostAllocator allocate_;
  const std::uint64_t retain_bytes_;
  mutable std::mutex mu_;
  std::multimap<std::uint64_t, store::HostMemory> free_;  // by size
  std::uint64_t free_bytes_ = 0;
  std::mutex prepare_mu_;  // over starting preparing_ (taken before mu_)
  std::thread preparing_;
  bool prepare_running_ = false;  // under mu_
};

}  // namespace uma
