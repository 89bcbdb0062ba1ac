#include "runtime/vocab_model.h"

#include <llama.h>

#include <cstdlib>
#include <string>

#include "runtime/llama_runtime.h"

namespace uma {

SpecialTokens special_tokens(const llama_model* model) {
  const llama_vocab* v = llama_model_get_vocab(model);
  const auto id = [](llama_token t) { return t == LLAMA_TOKEN_NULL ? -1 : static_cast<std::int32_t>(t); };
  SpecialTokens t;
  t.bos = id(llama_vocab_bos(v));
  t.eos = id(llama_vocab_eos(v));
  t.sep = id(llama_vocab_sep(v));
  t.add_bos = llama_vocab_get_add_bos(v);
  t.add_eos = llama_vocab_get_add_eos(v);
  t.add_sep = llama_vocab_get_add_sep(v);
  t.fim_pre = id(llama_vocab_fim_pre(v));
  t.fim_suf = id(llama_vocab_fim_suf(v));
  t.fim_mid = id(llama_vocab_fim_mid(v));
  t.fim_rep = id(llama_vocab_fim_rep(v));
  t.fim_sep = id(llama_vocab_fim_sep(v));
  return t;
}

bool model_is_reranker(const llama_model* model) {
  char arch[64] = {0}, pooling[16] = {0};
  if (llama_model_meta_val_str(model, "general.architecture", arch, sizeof arch) < 0) return false;
  const std::string key = std::string(arch) + ".pooling_type";
  return llama_model_meta_val_str(model, key.c_str(), pooling, sizeof pooling) >= 0 &&
         std::atoi(pooling) == static_cast<int>(LLAMA_POOLING_TYPE_RANK);
}

std::string rerank_template(const llama_model* model) {
  const char* t = llama_model_chat_template(model, "rerank");
  return t != nullptr ? t : "";
}

Status tokenize_text(const llama_vocab* vocab, std::string_view text, std::vector<Token>& out, bool parse_special) {
  return tokenize_text(vocab, text, out, parse_special, llama_vocab_get_add_bos(vocab));
}

std::string token_piece(const llama_vocab* vocab, Token token, bool special) {
  if (token < 0 || token >= llama_vocab_n_tokens(vocab)) return {};
  char buf[128];
  int32_t n = llama_token_to_piece(vocab, token, buf, sizeof buf, 0, special);
  if (n >= 0) return std::string(buf, static_cast<size_t>(n));
  std::string big(static_cast<size_t>(-n), '\0');
  n = llama_token_to_piece(vocab, token, big.data(), static_cast<int32_t>(big.size()), 0, special);
  big.resize(static_cast<size_t>(std::max(0, n)));
  return big;
}

const llama_vocab* model_vocab(const llama_model* model) { return llama_model_get_vocab(model); }

ModelNumbers model_numbers(const llama_model* model) {
  return {llama_model_n_ctx_train(model), llama_vocab_n_tokens(llama_model_get_vocab(model)), llama_model_n_embd_out(model),
          static_cast<std::int64_t>(llama_model_n_params(model)), static_cast<std::int64_t>(llama_model_size(model))};
}

Status tokenize_text(const llama_vocab* vocab, std::string_view text, std::vector<Token>& out, bool parse_special,
                     bool add_bos) {
  // A token is at least one byte, plus the BOS/EOS that add_special may add.
  out.resize(text.size() + 2);
  int32_t n = llama_tokenize(vocab, text.data(), static_cast<int32_t>(text.size()), out.data(),
                             static_cast<int32_t>(out.size()), add_bos, parse_special);
  if (n < 0) {
    out.resize(static_cast<size_t>(-n));
    n = llama_tokenize(vocab, text.data(), static_cast<int32_t>(text.size()), out.data(),
                       static_cast<int32_t>(out.size()), add_bos, parse_special);
  }
  if (n < 0) return Status(ErrorCode::kInternal, "tokenization failed");
  out.resize(static_cast<size_t>(n));
  return Status::Ok();
}

std::unique_ptr<VocabModel> VocabModel::open(const std::string& path, Status* st) {
  init_llama_backend();
  llama_model_params p = llama_model_default_params();
  p.vocab_only = true;
  std::unique_ptr<VocabModel> m(new VocabModel());
  m->model_ = llama_model_load_from_file(path.c_str(), p);
  if (m->model_ == nullptr) {
    *st = Status(ErrorCode::kIo, "cannot load the vocabulary of " + path);
    return nullptr;
  }
  return m;
}

VocabModel::~VocabModel() {
  if (model_ != nullptr) llama_model_free(model_);
}

Status VocabModel::tokenize(std::string_view text, std::vector<Token>& out, bool parse_special) const {
  return tokenize_text(llama_model_get_vocab(model_), text, out, parse_special);
}

}  // namespace uma
