// VocabCache: the vocabularies a gateway tokenizes prompts and renders chat with, one per model
// vocabulary, so each request is cut into exactly the tokens (and prefix blocks) the agent serving
// its model will see, and chat is rendered with that model's own template.
//
// Where they come from: a model's catalog entry names its vocab hash (cluster/model_catalog.h),
// handed over by the gateway's Redis reader with each view (set_catalog: never read on a request's
// path, and the last one stays while Redis cannot be read); `uma:vocab:{hash}` holds that
// vocabulary as a tensorless GGUF (store::vocab_gguf), loaded vocabulary-only
// (runtime/vocab_model.h) on first use. Models sharing a vocabulary share one entry. A model the
// catalog does not have (an agent started with a file of its own) gets the fallback (uma-gw
// --model), else kNotFound ("model_not_found").
//
// Bounds: at most `capacity` vocabularies besides the fallback, the least recently used dropped
// first; an entry in use by a request stays alive (shared_ptr) until that request lets go.
// Thread-safety: every method from any thread (get() from the gateway's tokenizer threads,
// set_catalog() from its Redis reader). A hit takes one short lock. A miss blocks its caller for
// the load (a Redis GET and llama.cpp's vocabulary load: tens to hundreds of milliseconds), one
// load at a time; hits go on meanwhile.
#pragma once

#include <chrono>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "cluster/redis_client.h"
#include "common/status.h"
#include "http/http_router.h"
#include "runtime/vocab_model.h"

namespace uma::gateway {

struct Vocabulary {
  std::string hash;
  std::unique_ptr<VocabModel> vocab;
  // Renders with the model's template (or the gateway's --chat-template); without either, chat is
  // answered with why not.
  http_route::ChatTemplate render;
};

// A vocabulary from a GGUF file (uma-gw --model), its hash computed as the catalog's is.
std::shared_ptr<const Vocabulary> open_vocabulary(const std::string& gguf_path, const std::string& chat_template, Status* st);

class VocabCache {
 public:
  struct Options {
    std::size_t capacity = 8;
    std::string chat_template;  // --chat-template: overrides every model's
    std::chrono::milliseconds redis_timeout{2000};
  };
  struct Stats {
    std::uint64_t hits = 0;
    std::uint64_t loads = 0;          // vocabularies loaded from the catalog
    std::uint64_t load_failures = 0;  // not in the catalog, unreadable, or not a vocabulary
    std::uint64_t evictions = 0;
    double load_seconds = 0;          // summed over loads
    std::size_t resident = 0;         // besides the fallback
  };

  // `redis`: where the catalog's vocabularies are read (nullopt: only the fallback). `fallback` may be null.
  VocabCache(Options options, std::optional<cluster::RedisAddress> redis, std::shared_ptr<const Vocabulary> fallback);
  ~VocabCache();

  // The catalog as last read: each model's vocab hash (gateway::ClusterView::catalog_vocab).
  void set_catalog(std::unordered_map<std::string, std::string> vocab_of);
  // The vocabulary requests for `model` use; null with *st set (kNotFound for a model nobody
  // knows, kUnavailable when its vocabulary cannot be had).
  std::shared_ptr<const Vocabulary> get(const std::string& model, Status* st);
  Stats stats() const;

 private:
  std::shared_ptr<const Vocabulary> resident(const std::string& hash);  // under mu_: the entry, touched
  std::shared_ptr<const Vocabulary> load(const std::string& model, const std::string& hash, Status* st);  // under load_mu_
  void insert(std::shared_ptr<const Vocabulary> v);                                // under mu_

  Options options_;
  std::shared_ptr<const Vocabulary> fallback_;
  std::unique_ptr<cluster::RedisClient> redis_;  // used under load_mu_ only
  std::mutex load_mu_;                           // one load at a time (taken before mu_, never inside it)
  mutable std::mutex mu_;
  std::unordered_map<std::string, std::string> vocab_of_;  // the catalog: model -> vocab hash
  std::list<std::shared_ptr<const Vocabulary>> lru_;  // most recently used first
  Stats stats_;
};

}  // namespace uma::gateway
