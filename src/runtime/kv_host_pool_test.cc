// KvHostPool over a counting allocator (the page-locking one needs a GPU): blocks come back for
// reuse, within what the pool retains, and a failed allocation still gives usable memory; the
// arena, page-locked once when the first snapshot is coming, serves snapshots with no allocation while they fit.
#include "runtime/kv_host_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <cstring>

namespace uma {
namespace {

struct CountingAllocator {
  std::atomic<int> allocated{0}, released{0};  // prepare() allocates on a thread of its own
  std::atomic<bool> fail{false};
  store::HostAllocator fn() {
    return [this](std::uint64_t bytes) -> store::HostMemory {
      if (fail) return {};
      ++allocated;
      auto* p = new std::uint8_t[bytes];
      store::HostMemory m;
      m.data = p;
      m.size = bytes;
      m.pinned = true;
      m.release = [this, p] { ++released, delete[] p; };
      return m;
    };
  }
};

TEST(KvHostPool, AFreedBlockServesTheNextSnapshotThatFitsIt) {
  CountingAllocator a;
  auto pool = KvHostPool::make(a.fn(), 1 << 20);
  {
    HostBytes s = pool->take(10000);
    ASSERT_EQ(s.size(), 10000u);
    std::memset(s.data(), 7, s.size());  // the memory is usable end to end
  }
  EXPECT_EQ(a.allocated, 1);
  EXPECT_EQ(a.released, 0) << "kept for reuse";
  EXPECT_EQ(pool->retained_bytes(), 12288u) << "whole pages";
  HostBytes again = pool->take(9000);
  EXPECT_EQ(a.allocated, 1) << "reused";
  HostBytes small = pool->take(100);
  EXPECT_EQ(a.allocated, 2);
}

TEST(KvHostPool, ABlockMuchLargerThanAskedIsNotUsedForIt) {
  CountingAllocator a;
  auto pool = KvHostPool::make(a.fn(), 1 << 20);
  pool->take(400000).clear();
  HostBytes small = pool->take(4096);
  EXPECT_EQ(a.allocated, 2) << "a block at most 1.5 times the size asked";
  EXPECT_EQ(pool->retained_bytes(), 401408u) << "the large one still kept";
}

TEST(KvHostPool, WhatIsFreedBeyondTheRetainLimitIsReleased) {
  CountingAllocator a;
  auto pool = KvHostPool::make(a.fn(), 16384);
  HostBytes x = pool->take(12288), y = pool->take(12288), z = pool->take(4096);
  x.clear();
  EXPECT_EQ(a.released, 0);
  y.clear();
  EXPECT_EQ(a.released, 1) << "over the limit: released at once";
  pool.reset();  // the last snapshot keeps the pool alive
  EXPECT_EQ(a.released, 1);
  z.clear();
  EXPECT_EQ(a.released, 3) << "z's (retained) and x's, with the pool";
}

TEST(KvHostPool, WithoutPageLockedMemoryASnapshotStillGetsHeapMemory) {
  CountingAllocator a;
  a.fail = true;
  auto pool = KvHostPool::make(a.fn(), 1 << 20);
  HostBytes s = pool->take(5000);
  ASSERT_EQ(s.size(), 5000u);
  std::memset(s.data(), 1, s.size());
  s.clear();
  EXPECT_EQ(pool->retained_bytes(), 0u);
}

TEST(KvHostPool, APreparedBlockIsReadyForTheSnapshotThatNeedsIt) {
  CountingAllocator a;
  {
    auto pool = KvHostPool::make(a.fn(), 1 << 20);
    pool->prepare(50000);
    pool->prepare(50000);  // ignored while the first runs, or because its block is ready
    pool->wait_prepared();
    EXPECT_EQ(a.allocated, 1);
    EXPECT_EQ(pool->retained_bytes(), 53248u);
    pool->prepare(45000);  // that block fits it already
    pool->wait_prepared();
    EXPECT_EQ(a.allocated, 1);
    HostBytes s = pool->take(50000);
    ASSERT_EQ(s.size(), 50000u);
    EXPECT_EQ(a.allocated, 1) << "the prepared block";
    pool->prepare(300000);
    HostBytes t = pool->take(300000);  // whether or not the preparation finished first
    EXPECT_EQ(t.size(), 300000u);
  }
  EXPECT_EQ(a.released, a.allocated) << "the pool joins its thread and releases what it kept";
}

TEST(HostBytes, MovesOwnershipAndReleasesOnce) {
  int released = 0;
  auto* p = new std::uint8_t[8];
  HostBytes a(p, 8, [&released, p] { ++released, delete[] p; });
  HostBytes b = std::move(a);
  EXPECT_TRUE(a.empty());
  b.truncate(3);
  EXPECT_EQ(b.size(), 3u);
  HostBytes c;
  c = std::move(b);
  EXPECT_EQ(released, 0);
  c.clear();
  c.clear();
  EXPECT_EQ(released, 1);
}

TEST(KvHostPool, TheArenaServesSnapshotsWithNoAllocationWhileTheyFitAndMergesWhatIsFreed) {
  CountingAllocator a;
  auto pool = KvHostPool::make(a.fn(), 1 << 20, 64 * 4096);
  pool->wait_prepared();
  ASSERT_EQ(a.allocated, 0) << "nothing page-locked before a snapshot is coming";
  pool->prepare(40 * 4096);  // the first: the arena's page-locking begins, and will serve it
  pool->wait_prepared();
  ASSERT_EQ(a.allocated, 1) << "the arena alone";
  ASSERT_EQ(pool->arena_free_bytes(), 64u * 4096);
  pool->prepare(40 * 4096);
  pool->wait_prepared();
  EXPECT_EQ(a.allocated, 1) << "the arena has room: nothing to page-lock";
  HostBytes x = pool->take(20 * 4096), y = pool->take(20 * 4096 - 100), z = pool->take(20 * 4096);
  EXPECT_EQ(a.allocated, 1);
  EXPECT_EQ(pool->arena_free_bytes(), 4u * 4096);
  std::memset(x.data(), 1, x.size());
  std::memset(y.data(), 2, y.size());
  std::memset(z.data(), 3, z.size());
  EXPECT_EQ(x.data()[x.size() - 1], 1);  // no snapshot overlaps another
  EXPECT_EQ(y.data()[0], 2);
  EXPECT_EQ(y.data()[y.size() - 1], 2);
  EXPECT_EQ(z.data()[0], 3);
  HostBytes w = pool->take(10 * 4096);
  EXPECT_EQ(a.allocated, 2) << "beyond the arena: a block of its own";
  // x and y freed side by side make one range that a snapshot of both their sizes fits.
  x.clear();
  y.clear();
  EXPECT_EQ(pool->arena_free_bytes(), 44u * 4096);
  HostBytes both = pool->take(40 * 4096);
  EXPECT_EQ(a.allocated, 2) << "the merged range";
  both.clear();
  z.clear();
  EXPECT_EQ(pool->arena_free_bytes(), 64u * 4096) << "all of it one range again";
  HostBytes all = pool->take(64 * 4096);
  EXPECT_EQ(a.allocated, 2);
}

TEST(KvHostPool, ARangeFreedBeforeAFreeOneMergesWithIt) {
  CountingAllocator a;
  auto pool = KvHostPool::make(a.fn(), 1 << 20, 8 * 4096);
  pool->prepare(4096);
  pool->wait_prepared();
  HostBytes x = pool->take(2 * 4096), y = pool->take(2 * 4096), z = pool->take(4 * 4096);
  z.clear();  // the arena's tail is free: [4, 8)
  y.clear();  // [2, 4) joins it
  HostBytes big = pool->take(6 * 4096);
  EXPECT_EQ(a.allocated, 1) << "[2, 8) as one range";
  EXPECT_EQ(big.data(), x.data() + 2 * 4096);
}

TEST(KvHostPool, DestroyingThePoolWaitsForTheArenaBeingPageLocked) {
  std::promise<void> gate;
  std::shared_future<void> open = gate.get_future().share();
  std::atomic<int> released{0};
  store::HostAllocator slow = [open, &released](std::uint64_t bytes) -> store::HostMemory {
    open.wait();  // page-locking under way until the test lets it finish
    auto* p = new std::uint8_t[bytes];
    store::HostMemory m;
    m.data = p;
    m.size = bytes;
    m.release = [p, &released] { ++released, delete[] p; };
    return m;
  };
  auto pool = KvHostPool::make(slow, 1 << 20, 4 * 4096);
  pool->prepare(4096);
  EXPECT_EQ(pool->arena_free_bytes(), 0u) << "not yet";
  std::future<void> destroyed = std::async(std::launch::async, [&pool] { pool.reset(); });
  gate.set_value();
  destroyed.get();  // joined the arena's thread, then freed the arena with the pool
  EXPECT_EQ(released, 1);
}

TEST(KvHostPool, AnArenaSnapshotOutlivesThePoolAndTheArenaGoesWithTheLastOne) {
  CountingAllocator a;
  auto pool = KvHostPool::make(a.fn(), 1 << 20, 16 * 4096);
  pool->prepare(4096);
  pool->wait_prepared();
  HostBytes s = pool->take(4096);
  pool.reset();
  EXPECT_EQ(a.released, 0) << "the snapshot holds the arena";
  std::memset(s.data(), 5, s.size());
  s.clear();
  EXPECT_EQ(a.released, 1);
}

TEST(KvHostPool, WithoutAnArenaSnapshotsStillGetBlocks) {
  CountingAllocator a;
  a.fail = true;  // the arena cannot be had
  auto pool = KvHostPool::make(a.fn(), 1 << 20, 16 * 4096);
  pool->prepare(4096);
  pool->wait_prepared();
  EXPECT_EQ(pool->arena_free_bytes(), 0u);
  a.fail = false;
  HostBytes s = pool->take(4096);
  EXPECT_EQ(a.allocated, 1) << "a block";
}

}  // namespace
}  // namespace uma
