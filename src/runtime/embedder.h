// Embedder: pooled embeddings from a second llama.cpp context on the weights a LlamaRuntime
// already holds (no second copy of the model), with `embeddings` on and the model's own pooling
// type, else mean. One pass embeds several inputs at once, each as its own sequence; the vectors
// are L2-normalised (OpenAI's embeddings are unit length). A reranker's (rank pooling) are its
// classifier's scores for each input, as they come.
//
// Thread-safety: none; the compute thread owns it (its passes run between decode ticks).
// Ownership: it borrows the model, which must outlive it; it owns its context.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "runtime/decoder.h"

struct llama_model;
struct llama_context;

namespace uma {

class Embedder {
 public:
  // Null with *st set when the context cannot be made. max_tokens: the longest input (and the
  // tokens of one pass); threads as the runtime's.
  static std::unique_ptr<Embedder> open(llama_model* model, std::int32_t max_tokens, std::int32_t n_threads, Status* st);
  ~Embedder();
  Embedder(const Embedder&) = delete;
  Embedder& operator=(const Embedder&) = delete;

  // One vector per input, in order. Inputs must each be 1..max_tokens() tokens of the vocabulary.
  Status embed(std::span<const std::vector<Token>> inputs, std::vector<std::vector<float>>* out);
  std::int32_t max_tokens() const { return max_tokens_; }
  std::int32_t dimensions() const { return dims_; }
  std::int32_t max_inputs() const { return max_seqs_; }  // inputs one pass holds at most
  const char* pooling() const;
  void set_threads(std::int32_t n);  // from the next embed()

 private:
  Embedder() = default;
  Status pass(std::span<const std::vector<Token>> inputs, std::vector<std::vector<float>>* out);

  llama_model* model_ = nullptr;
  llama_context* ctx_ = nullptr;
  std::int32_t max_tokens_ = 0;
  std::int32_t max_seqs_ = 0;
  std::int32_t dims_ = 0;
  int pooling_ = 0;
};

}  // namespace uma
