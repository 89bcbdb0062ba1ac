#include "serve/prepare_stage.h"

#include <utility>

namespace uma {

PrepareStage::PrepareStage(Options options, Tokenize tokenize, WorkSubmit next)
    : options_(options), tokenize_(std::move(tokenize)), next_(std::move(next)) {
  for (int i = 0; i < options_.threads; ++i) threads_.emplace_back([this] { serve(); });
}

PrepareStage::~PrepareStage() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void PrepareStage::prepare(Request& r) const {
  std::vector<Token> tokens;
  if (tokenize_(r.prompt, tokens, r.parse_special).ok() && !tokens.empty()) {
    r.prompt_tokens = std::move(tokens);
    r.prompt.clear();
  }
}

void PrepareStage::submit(WorkItem item) {
  if (auto* cancel = std::get_if<CancelRequest>(&item)) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = pending_.find(cancel->id);
      if (it != pending_.end()) {
        it->second = true;  // sent after its request
        return;
      }
    }
    return next_(std::move(item));
  }
  Request& r = std::get<Request>(item);
  const bool text = r.prompt_tokens.empty() && r.embed_inputs.empty() && !r.prompt.empty();
  if (!text || threads_.empty() || r.prompt.size() < options_.pool_bytes) {
    if (text) prepare(r);
    return next_(std::move(item));
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_[r.id] = false;
    queue_.emplace_back(std::move(r));
  }
  cv_.notify_one();
}

bool PrepareStage::run(std::function<void()> job) {
  if (threads_.empty()) return false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.emplace_back(std::move(job));
  }
  cv_.notify_one();
  return true;
}

void PrepareStage::serve() {
  for (;;) {
    std::variant<Request, std::function<void()>> item;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      item = std::move(queue_.front());
      queue_.pop_front();
    }
    if (auto* job = std::get_if<std::function<void()>>(&item)) {
      (*job)();
      continue;
    }
    Request& r = std::get<Request>(item);
    prepare(r);
    const RequestId id = r.id;
    next_(std::move(r));
    bool cancelled = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = pending_.find(id);
      cancelled = it->second;
      pending_.erase(it);
    }
    // A cancel that came meanwhile; one that comes from now on goes straight through, after it.
    if (cancelled) next_(CancelRequest{id});
  }
}

}  // namespace uma
