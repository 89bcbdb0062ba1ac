#include "runtime/vocab_model.h"

#include <llama.h>

#include "runtime/llama_runtime.h"

namespace uma {

Status tokenize_text(const llama_vocab* vocab, std::string_view text, std::vector<Token>& out, bool parse_special) {
  const bool add_bos = llama_vocab_get_add_bos(vocab);
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
