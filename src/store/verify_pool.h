// VerifyPool: threads that hash a model image's chunks against its manifest as they arrive, so
// verification runs beside the reads instead of after them (one core hashes ~1.7 GB/s; a fast
// NVMe drive or the page cache deliver more, so a load keeps several cores hashing).
// Thread-safety: submit() from any thread; `done` runs on a pool thread.
// Lifetime: the destructor finishes the queued work, then joins; submit() after it began is a bug.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "common/status.h"
#include "store/model_image.h"

namespace uma::store {

class VerifyPool {
 public:
  explicit VerifyPool(int threads);  // <= 0: the hardware's threads
  ~VerifyPool();
  VerifyPool(const VerifyPool&) = delete;
  VerifyPool& operator=(const VerifyPool&) = delete;

  // Hashes chunk `i` of `image` as it lies in the image's memory; `done` gets ok or the kIo
  // mismatch. The chunk is not marked ready here: `done` decides (write it to a tier first, say).
  void submit(std::shared_ptr<ModelImage> image, std::size_t i, std::function<void(Status)> done);
  int threads() const { return static_cast<int>(threads_.size()); }

 private:
  struct Job {
    std::shared_ptr<ModelImage> image;
    std::size_t chunk;
    std::function<void(Status)> done;
  };
  void run();
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> jobs_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace uma::store
