#include "gateway/vocab_cache.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "chat/chat_templates.h"
#include "cluster/model_catalog.h"
#include "store/manifest.h"

namespace uma::gateway {

namespace {

http_route::ChatTemplate template_of(const VocabModel& vocab, const std::string& override_template) {
  Status st;
  std::shared_ptr<const ChatTemplates> chat = ChatTemplates::load(vocab.model(), override_template, &st);
  if (!chat && override_template.empty()) chat = ChatTemplates::chatml_fallback(vocab.model(), &st);  // as umad's
  if (!chat) return [st](const ChatRequest&, ChatPrompt*) { return st; };
  return [chat](const ChatRequest& request, ChatPrompt* out) { return chat->render(request, out); };
}

// A vocabulary from the catalog's bytes: llama.cpp loads from a path, so the bytes go into a memfd
// read through /proc (no file left behind).
std::shared_ptr<const Vocabulary> vocabulary_from_bytes(const std::string& hash, const std::string& gguf,
                                                        const std::string& chat_template, Status* st) {
  const int fd = ::memfd_create("uma-vocab", MFD_CLOEXEC);
  if (fd < 0) {
    *st = {ErrorCode::kIo, std::string("memfd_create: ") + std::strerror(errno)};
    return nullptr;
  }
  std::size_t done = 0;
  while (done < gguf.size()) {
    const ssize_t n = ::write(fd, gguf.data() + done, gguf.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      *st = {ErrorCode::kIo, std::string("writing a vocabulary: ") + std::strerror(errno)};
      ::close(fd);
      return nullptr;
    }
    done += static_cast<std::size_t>(n);
  }
  auto v = std::make_shared<Vocabulary>();
  v->hash = hash;
  v->vocab = VocabModel::open("/proc/self/fd/" + std::to_string(fd), st);
  ::close(fd);
  if (!v->vocab) {
    *st = {ErrorCode::kModelLoad, "the catalog's vocabulary " + hash.substr(0, 16) + " does not load"};
    return nullptr;
  }
  v->render = template_of(*v->vocab, chat_template);
  return v;
}

Status unknown_model(const std::string& model) {
  return {ErrorCode::kNotFound, "The model '" + model + "' does not exist", "model"};
}

}  // namespace

std::shared_ptr<const Vocabulary> open_vocabulary(const std::string& gguf_path, const std::string& chat_template, Status* st) {
  auto v = std::make_shared<Vocabulary>();
  std::string ignored;
  if (*st = store::vocab_gguf(gguf_path, &ignored, &v->hash); !st->ok()) return nullptr;
  if (v->vocab = VocabModel::open(gguf_path, st); !v->vocab) return nullptr;
  v->render = template_of(*v->vocab, chat_template);
  return v;
}

VocabCache::VocabCache(Options options, std::optional<cluster::RedisAddress> redis, std::shared_ptr<const Vocabulary> fallback)
    : options_(std::move(options)), fallback_(std::move(fallback)) {
  if (redis) redis_ = std::make_unique<cluster::RedisClient>(std::move(*redis), options_.redis_timeout);
}

VocabCache::~VocabCache() = default;

std::shared_ptr<const Vocabulary> VocabCache::resident(const std::string& hash) {
  if (fallback_ && fallback_->hash == hash) return fallback_;
  for (auto it = lru_.begin(); it != lru_.end(); ++it) {
    if ((*it)->hash != hash) continue;
    lru_.splice(lru_.begin(), lru_, it);
    return lru_.front();
  }
  return nullptr;
}

void VocabCache::insert(std::shared_ptr<const Vocabulary> v) {
  lru_.push_front(std::move(v));
  while (lru_.size() > std::max<std::size_t>(1, options_.capacity)) {
    lru_.pop_back();
    ++stats_.evictions;
  }
}

void VocabCache::set_catalog(std::unordered_map<std::string, std::string> vocab_of) {
  std::lock_guard lock(mu_);
  vocab_of_ = std::move(vocab_of);
}

std::shared_ptr<const Vocabulary> VocabCache::get(const std::string& model, Status* st) {
  std::string hash;
  {
    std::lock_guard lock(mu_);
    auto it = vocab_of_.find(model);
    if (it == vocab_of_.end()) {  // not in the catalog
      if (!fallback_) *st = unknown_model(model);
      return fallback_;
    }
    hash = it->second;
    if (std::shared_ptr<const Vocabulary> v = resident(hash)) {
      ++stats_.hits;
      return v;
    }
  }
  std::lock_guard load_lock(load_mu_);
  return load(model, hash, st);
}

std::shared_ptr<const Vocabulary> VocabCache::load(const std::string& model, const std::string& hash, Status* st) {
  {
    std::lock_guard lock(mu_);
    if (std::shared_ptr<const Vocabulary> v = resident(hash)) {  // loaded by another thread meanwhile
      ++stats_.hits;
      return v;
    }
  }
  const auto t0 = std::chrono::steady_clock::now();
  std::string gguf;
  Status s = hash.empty() ? Status(ErrorCode::kNotFound, "its catalog entry names none")
             : redis_     ? cluster::catalog_vocab(*redis_, hash, &gguf)
                          : Status(ErrorCode::kNotFound, "no catalog");
  std::shared_ptr<const Vocabulary> v;
  if (s.ok()) v = vocabulary_from_bytes(hash, gguf, options_.chat_template, &s);
  std::lock_guard lock(mu_);
  if (!v) {
    ++stats_.load_failures;
    *st = {s.code() == ErrorCode::kNotFound ? ErrorCode::kUnavailable : s.code(),
           "no vocabulary for model '" + model + "': " + s.message() + " (uma-store add registers one)", "model"};
    return nullptr;
  }
  ++stats_.loads;
  stats_.load_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  insert(v);
  return v;
}

VocabCache::Stats VocabCache::stats() const {
  std::lock_guard lock(mu_);
  Stats s = stats_;
  s.resident = lru_.size();
  return s;
}

}  // namespace uma::gateway
