// ModelImage: one model's whole GGUF file in host memory, filled chunk by chunk (in any order) by
// one producer (a tier reader) while consumers (llama.cpp's tensor callback) wait for just the
// chunks they need. This is what lets a load stream: tensor k is copied to its backend while the
// chunks of tensor k+1 are still being read, fetched or verified.
//
// Memory: page-aligned (O_DIRECT reads land in it directly, no bounce buffer) and rounded up to
// 4096 bytes; it comes from a HostAllocator, so a GPU build can hand out pinned memory (the
// runtime's; this layer does not know backends) and the DMA to the GPU needs no staging copy.
// A chunk is marked ready only after it matched its sha256 (manifest.h): a consumer never sees
// bytes that were not verified.
// Thread-safety: every method may be called from any thread; chunk memory may be written only by
// the producer, and only for chunks not yet marked ready.
// Lifetime: shared_ptr; the tier store, a loading runtime and waiting requests share one image.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "common/status.h"
#include "store/manifest.h"

namespace uma::store {

struct HostMemory {
  std::uint8_t* data = nullptr;
  std::uint64_t size = 0;
  bool pinned = false;
  int fd = -1;  // a memfd holding the bytes at offset 0 (data maps it), or -1: anonymous memory
  std::function<void()> release;  // frees it; empty when nothing to free
};
// Allocates `bytes` (a multiple of 4096), page-aligned. An empty `data` on failure.
using HostAllocator = std::function<HostMemory(std::uint64_t bytes)>;
// A memfd mapped shared: the CPU default. A model on the CPU then maps its image in place
// (llama.cpp's mmap of the memfd: no copy, no second allocation, one copy of the weights in
// memory), and the pages live on while any mapping holds them.
HostMemory allocate_shared(std::uint64_t bytes);
// Anonymous private memory (when a memfd cannot be had).
HostMemory allocate_pageable(std::uint64_t bytes);

class ModelImage {
 public:
  // kModelLoad when the memory cannot be had.
  static std::shared_ptr<ModelImage> create(std::shared_ptr<const Manifest> manifest, const HostAllocator& alloc,
                                            Status* status);
  ~ModelImage();
  ModelImage(const ModelImage&) = delete;
  ModelImage& operator=(const ModelImage&) = delete;

  const Manifest& manifest() const { return *manifest_; }
  std::shared_ptr<const Manifest> manifest_ptr() const { return manifest_; }
  std::uint8_t* data() { return mem_.data; }
  const std::uint8_t* data() const { return mem_.data; }
  std::uint64_t capacity() const { return mem_.size; }  // bytes rounded up to 4096
  bool pinned() const { return mem_.pinned; }
  int fd() const { return mem_.fd; }  // see HostMemory::fd
  std::span<std::uint8_t> chunk(std::size_t i) { return {mem_.data + manifest_->chunk_offset(i), manifest_->chunk_size(i)}; }

  // Producer: chunk i is in place and matched its hash.
  void chunk_ready(std::size_t i);
  // Producer: the image cannot be completed; every waiter gets `why`.
  void fail(Status why);
  // Consumer: blocks until every chunk of [offset, offset + size) is ready (ok) or the image failed.
  Status wait(std::uint64_t offset, std::uint64_t size) const;
  Status wait_complete() const { return wait(0, manifest_->bytes); }

  bool complete() const;
  bool is_ready(std::size_t i) const;
  Status status() const;
  std::uint64_t ready_bytes() const;

 private:
  ModelImage(std::shared_ptr<const Manifest> m, HostMemory mem);
  std::shared_ptr<const Manifest> manifest_;
  HostMemory mem_;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  std::vector<std::uint8_t> ready_;
  std::size_t n_ready_ = 0;
  std::uint64_t ready_bytes_ = 0;
  Status failed_;
};

}  // namespace uma::store
