#include "store/verify_pool.h"

#include <algorithm>

namespace uma::store {

VerifyPool::VerifyPool(int threads) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { run(); });
}

VerifyPool::~VerifyPool() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void VerifyPool::submit(std::shared_ptr<ModelImage> image, std::size_t i, std::function<void(Status)> done) {
  {
    std::lock_guard lock(mu_);
    jobs_.push_back({std::move(image), i, std::move(done)});
  }
  cv_.notify_one();
}

void VerifyPool::run() {
  for (;;) {
    Job job;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
      if (jobs_.empty()) return;  // stopping, and nothing left
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    const auto bytes = job.image->chunk(job.chunk);
    job.done(job.image->manifest().verify_chunk(job.chunk, bytes));
  }
}

}  // namespace uma::store
