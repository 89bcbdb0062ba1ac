// KvHostPool: page-locked host memory for KV snapshots (host_bytes.h), reused.
//
// A snapshot in page-locked memory goes to and from the GPU at the link's rate; one in pageable
// memory goes through the driver's staging copies (an 8B's 3000-token prefix, 400 MB: ~300 ms on
// a GPU host, 8.6 ms page-locked). Page-locking costs about as much as such a copy (136-160 ms
// for 400 MB there) and holds the GPU's driver while it runs: a decode's KV copy launched meanwhile
// waits it out (a 197 ms tick, docs/BENCHMARKS.md). So:
// - an arena of `arena_bytes` is page-locked once, on a thread of its own, when the first
//   snapshot is coming (the first prepare() or take()), and later snapshots are cut from it (first
//   fit, whole pages, freed ranges merged): serving never page-locks while a snapshot fits there.
//   Not at start (as vLLM's swap space and SGLang's host KV pool are): a server that never
//   snapshots holds none of it (an 8B on a GPU held 1.6 GB of RSS with the arena at start,
//   0.6 GB without; llama-server 0.45);
// - beyond it, blocks are page-locked per snapshot; freed ones stay in a store::HostPool (the
//   model images' reuse pool, here over page-locked blocks) up to `retain_bytes`, and prepare()
//   page-locks one ahead on a thread of its own.
// Where no page-locked memory can be had, take() gives heap memory.
// Thread-safety: every method may be called from any thread; snapshots may outlive the pool (and
// keep the arena alive). The destructor waits for the page-locking under way.
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
  static std::shared_ptr<KvHostPool> make(store::HostAllocator allocate, std::uint64_t retain_bytes,
                                          std::uint64_t arena_bytes = 0);
  ~KvHostPool();
  HostBytes take(std::size_t bytes);
  // A block take(bytes) would use is made ready in the background, unless the arena or a free
  // block has room for it or a preparation is under way.
  void prepare(std::size_t bytes);
  void wait_prepared();  // returns once no page-locking (the arena's included) is under way
  std::uint64_t retained_bytes() const { return pool_.free_bytes(); }
  std::uint64_t arena_free_bytes() const;  // 0 until the arena is page-locked (after the first snapshot is coming)

 private:
  struct Arena;
  KvHostPool(store::HostAllocator allocate, std::uint64_t retain_bytes)
      : pool_(allocate, retain_bytes), take_(pool_.allocator()), allocate_(std::move(allocate)) {}

  store::HostPool pool_;
  store::HostAllocator take_;
  store::HostAllocator allocate_;
  void start_arena();  // under mu_: the arena's page-locking begins, once
  std::uint64_t arena_bytes_ = 0;
  bool arena_started_ = false;     // under mu_
  std::shared_ptr<Arena> arena_;  // set once page-locked (under mu_)
  mutable std::mutex mu_;         // over preparing_, running_, arena_
  std::thread preparing_;
  std::thread arena_thread_;
  bool running_ = false;  // under mu_ (set by prepare, cleared by its thread)
  bool arena_pending_ = false;  // under mu_: the arena is being page-locked
};

}  // namespace uma
