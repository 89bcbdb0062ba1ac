// KvHostPool: page-locked host memory for KV snapshots (host_bytes.h), reused.
//
// A snapshot in page-locked memory goes to and from the GPU at the link's rate; one in pageable
// memory goes through the driver's staging copies (an 8B's 3000-token prefix, 400 MB: ~300 ms on
// an H100 host, 8.6 ms page-locked). Page-locking costs about as much as such a copy (136-160 ms
// for 400 MB there), so freed blocks stay in a store::HostPool (the model images' reuse pool,
// here over page-locked blocks) up to `retain_bytes`, and prepare() page-locks one ahead on a
// thread of its own. Where no page-locked memory can be had, take() gives heap memory.
// Thread-safety: every method may be called from any thread; snapshots may outlive the pool.
// The destructor waits for a preparation under way.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>

#include "runtime/host_bytes.h"
#include "store/host_pool.h"

namespace uma {

class KvHostPool {
 public:
  static std::shared_ptr<KvHostPool> make(store::HostAllocator allocate, std::uint64_t retain_bytes);
  ~KvHostPool();
  HostBytes take(std::size_t bytes);
  // A block take(bytes) would use is made ready in the background, unless one is free or a
  // preparation is under way.
  void prepare(std::size_t bytes);
  void wait_prepared();  // returns once no preparation is under way
  std::uint64_t retained_bytes() const { return pool_.free_bytes(); }

 private:
  KvHostPool(store::HostAllocator allocate, std::uint64_t retain_bytes)
      : pool_(std::move(allocate), retain_bytes), take_(pool_.allocator()) {}

  store::HostPool pool_;
  store::HostAllocator take_;
  std::mutex mu_;  // over preparing_
  std::thread preparing_;
  bool running_ = false;  // under mu_ (set by prepare, cleared by its thread)
};

}  // namespace uma
