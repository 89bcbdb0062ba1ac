// TierStore: one agent's model bytes across its tiers, and the loader thread that moves them.
//
//   DRAM    whole model images in host memory (pinned where the allocator gives pinned memory),
//           kept after use under a byte budget, least recently used dropped first, never one in use
//   NVMe    a directory of complete files `ID.gguf`, under a byte budget (LRU); a download in
//           progress is `ID.gguf.part` with `ID.chunks` (one byte a chunk: 1 = written and verified)
//           beside it, so a restarted agent resumes it instead of starting again
//   remote  the catalog's URL (HTTP Range, remote_fetch.h)
//
// acquire() returns at once with an image that fills in the background (ModelImage::wait lets a
// llama.cpp load stream from it). Fills run one at a time on the loader thread, in order: the
// queue's bytes are what a new load waits behind (routing's L term). A fill reads what the
// fastest tier holds and fetches the rest from the next: chunks of the NVMe file that fail their
// hash are fetched again from the remote tier and written back (counted: `corrupt_chunks`,
// `refetched_chunks`); a remote fetch writes every verified chunk to the NVMe tier as it arrives.
// Each completed fill updates the measured rate of the tier it came from.
//
// Thread-safety: every public method may be called from any thread.
// Lifetime: stop() (and the destructor) fails queued fills (kShuttingDown), cancels the running
// one and joins the loader thread; acquire() fails from then on.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/status.h"
#include "store/direct_read.h"
#include "store/host_pool.h"
#include "store/model_image.h"
#include "store/remote_fetch.h"
#include "store/tier.h"
#include "store/verify_pool.h"

namespace uma::store {

// A model as the catalog knows it: what it must be, and where it can be fetched from.
struct ModelSource {
  std::shared_ptr<const Manifest> manifest;
  std::string url;  // the remote tier; empty: none
};

struct TierConfig {
  std::string nvme_dir;             // empty: no NVMe tier
  std::uint64_t nvme_bytes = 0;     // 0: no limit
  std::uint64_t dram_bytes = 0;     // images kept when unused; 0: none kept
  int verify_threads = 0;           // 0: the hardware's threads
  DirectReadOptions direct;
  RemoteOptions remote;
  HostAllocator alloc;              // new blocks for images; empty: store::allocate_shared
  std::uint64_t pool_bytes = 0;     // freed image blocks kept for reuse (host_pool.h); 0: none
};

struct FillRecord {
  std::string id;
  Tier from = Tier::kNone;          // the tier the fill read from: nvme (repairs from remote counted below) or remote
  bool mixed = false;               // bytes came from two tiers (repairs, a resumed download): no tier rate from it
  std::uint64_t bytes = 0;
  double seconds = 0;
  std::uint64_t corrupt_chunks = 0;  // chunks that failed their hash (any tier)
  std::uint64_t refetched_chunks = 0;  // NVMe chunks fetched again from the remote tier
  std::uint64_t resumed_transfers = 0;
  bool direct = true;               // NVMe reads bypassed the page cache
  bool io_uring = true;             // NVMe reads went through io_uring (false: refused here, pread)
  Status status;
};

struct ModelTierInfo {
  std::string id;
  Tier tier = Tier::kNone;          // the fastest tier holding all of it
  bool filling = false;
  std::uint64_t bytes = 0;
  std::uint64_t ready_bytes = 0;    // of the image being filled or kept (or an NVMe prefetch's)
  std::string last_error;           // why its last fill failed; "" when it succeeded or none ran
  int users = 0;
};

class TierStore {
 public:
  explicit TierStore(TierConfig config);
  ~TierStore();
  TierStore(const TierStore&) = delete;
  TierStore& operator=(const TierStore&) = delete;
  void stop();  // idempotent; from one thread (the owner's)

  // The model's image (kept, filling, or a new fill queued), held for the caller until release().
  std::shared_ptr<ModelImage> acquire(const ModelSource& source, Status* status);
  void release(const std::string& id);
  // Brings the model to `to` (kNvme: its file, whatever DRAM holds; kDram: an image kept as
  // unused, within the DRAM budget) without a user.
  Status prefetch(const ModelSource& source, Tier to);
  // Drops a kept image and the NVMe file of a model no one uses (uma-store rm, tests).
  void forget(const std::string& id);

  Tier tier(const std::string& id) const;
  std::uint64_t queued_bytes() const;  // bytes the loader still has to move, this fill's rest included
  double rate_bytes_s(Tier t) const;   // measured from completed fills (EWMA); 0 until one
  // Blocks until every fill queued so far is done (tests, the benchmark's cold starts).
  void drain();
  std::vector<FillRecord> history() const;
  // Every model it has been asked for, and the complete files of its NVMe directory.
  std::vector<ModelTierInfo> list() const;
  // The DRAM tier's complete images that live in a memfd (a standby pins them ahead), by recency.
  std::vector<std::shared_ptr<ModelImage>> dram_images() const;
  std::string nvme_path(const std::string& id) const;
  HostPool& pool() { return host_pool_; }

  // A model id must be a file name: [A-Za-z0-9._-], 1..128, not starting with '.'.
  static bool valid_id(std::string_view id);

 private:
  struct Entry {
    ModelSource source;
    std::shared_ptr<ModelImage> image;  // kept or filling; null: none
    std::shared_ptr<ModelImage> receiving;  // an NVMe prefetch's memory while it runs (its progress)
    std::string last_error;  // of its last fill, "" when that succeeded
    int fills = 0;  // fills queued or running for it (a prefetch and a load may both be)
    int users = 0;
    std::uint64_t last_used = 0;
  };
  struct Job {
    std::string id;
    ModelSource source;
    std::shared_ptr<ModelImage> image;  // null: an NVMe prefetch (no image kept)
  };
  void run();
  FillRecord fill(const Job& job);
  void evict_dram();
  void evict_nvme();
  Tier tier_locked(const std::string& id) const;
  bool nvme_complete(const std::string& id) const;

  TierConfig config_;
  HostPool host_pool_;
  VerifyPool pool_;
  mutable std::mutex mu_;
  std::condition_variable cv_;       // jobs queued, or stopping
  std::condition_variable idle_cv_;  // the queue ran dry
  std::map<std::string, Entry> entries_;
  std::deque<Job> jobs_;
  bool busy_ = false;
  std::uint64_t current_left_ = 0;
  std::shared_ptr<ModelImage> current_;
  bool stopping_ = false;
  std::atomic<bool> cancel_{false};  // the destructor: the running fill stops at its next read or poll
  std::uint64_t clock_ = 0;
  double rate_[3] = {0, 0, 0};
  std::vector<FillRecord> history_;
  std::thread loader_;
};

}  // namespace uma::store
