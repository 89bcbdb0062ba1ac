#include "serve/prepare_stage.h"

#include <utility>

namespace uma {

PrepareStage::PrepareStage(Options options, Tokenize tokenize, WorkSubmit next, PrepareImages images)
    : options_(options), tokenize_(std::move(tokenize)), next_(std::move(next)), images_(std::move(images)) {
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

void PrepareStage::prepare_images(Request& r) const {
  std::vector<Token> tokens;
  std::vector<PromptImage> placed;
  Status st = images_ ? images_(r, &tokens, &placed)
                      : Status(ErrorCode::kNotSupported, "image input: this server's model has no vision projector", "image");
  r.images.clear();  // the bytes are done with either way
  if (!st.ok()) {
    r.prepare_status = std::move(st);
    return;
  }
  r.prompt_tokens = std::move(tokens);
  r.prompt_images = std::move(placed);
  r.prompt.clear();
}

void PrepareStage::prepare(Request& r) const {
  if (!r.images.empty()) return prepare_images(r);
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
  const bool images = !r.images.empty();
  const bool text = r.prompt_tokens.empty() && r.embed_inputs.empty() && !r.prompt.empty();
  if (threads_.empty() || (!images && (!text || r.prompt.size() < options_.pool_bytes))) {
    if (text || images) prepare(r);
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
