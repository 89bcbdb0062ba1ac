// HostPool: host memory for model images that is reused instead of returned to the kernel.
//
// A fresh page costs its first touch (the kernel zeroes it; on a VM the hypervisor may back it
// only then): on a small VM, 0.6-1.2 s to touch 1.17 GB the first time,
// 0.044 s the second. A tier that reads a model into fresh memory pays that on every load, which
// is why ServerlessLLM keeps a pinned pool allocated at start. Here a released block goes back
// to a free list (up to `keep_bytes` in all) and the next image that fits takes it whole, pages
// already faulted in (and, on a GPU, already registered as pinned); `prefault()` warms blocks at
// start so even the first load finds them.
//
// A block is a memfd (the allocator's HostMemory::fd) large enough for the image: a model on the
// CPU maps it in place (runtime/image_loader.h), and its size past the GGUF's end is never read.
// Thread-safety: every method, and the allocator and release functions it hands out, may be called
// from any thread. Lifetime: blocks hold the pool's state (shared_ptr), so they may outlive it.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "store/model_image.h"

namespace uma::store {

class HostPool {
 public:
  // `base` allocates new blocks (allocate_shared, or the runtime's pinned allocator).
  HostPool(HostAllocator base, std::uint64_t keep_bytes);
  // An allocator for ModelImage::create: a free block of at least `bytes` (at most 1.5x, so a
  // small model does not pin a large block), else a new one; its release returns it here.
  HostAllocator allocator();
  // Allocates and touches blocks of `bytes` until `total` is free in the pool.
  void prefault(std::uint64_t bytes, std::uint64_t total);
  std::uint64_t free_bytes() const;
  bool has_free(std::uint64_t bytes) const;  // a free block the allocator would give for `bytes`
  std::uint64_t reused() const;  // allocations served from the free list

 private:
  struct State {
    ~State() {  // the last reference: the free blocks go back to the kernel (and are unpinned)
      for (HostMemory& m : free) {
        if (m.release) m.release();
      }
    }
    HostAllocator base;
    std::uint64_t keep_bytes;
    std::mutex mu;
    std::vector<HostMemory> free;
    std::uint64_t free_bytes = 0;
    std::uint64_t reused = 0;
  };
  static HostMemory take(const std::shared_ptr<State>& st, std::uint64_t bytes);
  static std::size_t best_fit(const State& st, std::uint64_t bytes);  // under st.mu; free.size(): none
  std::shared_ptr<State> st_;
};

}  // namespace uma::store
