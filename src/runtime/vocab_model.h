// Tokenizing as umad does, in one place: tokenize_text() is what LlamaRuntime (the daemon) and
// VocabModel (the gateway: a vocabulary-only load, no weights) both call, so a gateway cuts a
// prompt into exactly the tokens, and so the prefix blocks, that an agent will.
//
// VocabModel owns a vocabulary-only llama_model (the GGUF's tokenizer and chat template, megabytes
// instead of the weights). Thread-safety: tokenize() only reads the vocabulary (each llama_tokenize
// call keeps its state in a session of its own), so the gateway's tokenizer threads call it at once,
// as llama-server's HTTP threads do with one vocabulary (tokenize_input_prompts at the pin).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "runtime/decoder.h"

struct llama_model;
struct llama_vocab;

namespace uma {

// With the vocabulary's BOS when it adds one; parse_special: control tokens written as text (a
// chat template's) become those tokens.
Status tokenize_text(const llama_vocab* vocab, std::string_view text, std::vector<Token>& out, bool parse_special);
// The same with the BOS (and EOS, where the vocabulary adds one) as the caller says (/tokenize's add_special).
Status tokenize_text(const llama_vocab* vocab, std::string_view text, std::vector<Token>& out, bool parse_special,
                     bool add_special);
// A token's bytes ("" when not in the vocabulary); `special`: control tokens as their text.
std::string token_piece(const llama_vocab* vocab, Token token, bool special = false);

// What a model says about itself (/v1/models, /props).
struct ModelNumbers {
  std::int32_t n_ctx_train = 0;
  std::int32_t n_vocab = 0;
  std::int32_t n_embd = 0;  // an embedding's dimensions
  std::int64_t n_params = 0;
  std::int64_t size_bytes = 0;
};
ModelNumbers model_numbers(const llama_model* model);
// The vocabulary's BOS and fill-in-the-middle tokens (-1: none).
struct SpecialTokens {
  std::int32_t bos = -1, eos = -1, sep = -1;
  bool add_bos = false, add_eos = false, add_sep = false;
  std::int32_t fim_pre = -1, fim_suf = -1, fim_mid = -1, fim_rep = -1, fim_sep = -1;
};
SpecialTokens special_tokens(const llama_model* model);
// Whether the model ranks (its pooling type is rank: a reranker), and its rerank prompt template
// ("{query}" and "{document}" in it; "" when it has none).
bool model_is_reranker(const llama_model* model);
std::string rerank_template(const llama_model* model);
const llama_vocab* model_vocab(const llama_model* model);

class VocabModel {
 public:
  static std::unique_ptr<VocabModel> open(const std::string& path, Status* st);
  ~VocabModel();
  VocabModel(const VocabModel&) = delete;
  VocabModel& operator=(const VocabModel&) = delete;

  Status tokenize(std::string_view text, std::vector<Token>& out, bool parse_special) const;
  const llama_model* model() const { return model_; }

 private:
  VocabModel() = default;
  llama_model* model_ = nullptr;
};

}  // namespace uma
