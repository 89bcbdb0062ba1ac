#include "tools/oracle/oracle.h"

#include <llama.h>

#include <stdexcept>

#include "common/utf8.h"
#include "ipc/newline_wire.h"

namespace uma {

Oracle::Oracle(const std::string& model_path) {
  llama_log_set([](ggml_log_level, const char*, void*) {}, nullptr);
  llama_backend_init();
  llama_model_params p = llama_model_default_params();
  p.vocab_only = true;
  model_ = llama_model_load_from_file(model_path.c_str(), p);
  if (model_ == nullptr) throw std::runtime_error("cannot load " + model_path);
}

Oracle::~Oracle() { llama_model_free(model_); }

std::vector<std::int32_t> Oracle::tokenize(const std::string& text) const {
  const llama_vocab* vocab = llama_model_get_vocab(model_);
  std::vector<llama_token> out(text.size() + 2);
  const int n = llama_tokenize(vocab, text.data(), static_cast<int>(text.size()), out.data(),
                               static_cast<int>(out.size()), llama_vocab_get_add_bos(vocab), false);
  out.resize(static_cast<size_t>(n));
  return out;
}

std::vector<std::string> Oracle::expected_pieces(const std::string& prompt, int n) const {
  return pieces_after(tokenize(prompt).back(), n);
}

std::string Oracle::expected_text_after(std::int32_t last, int n) const {
  Utf8Stream utf8;
  std::string text;
  for (const std::string& p : pieces_after(last, n)) text += utf8.push(p);
  return text + utf8.finish();
}

std::vector<std::string> Oracle::pieces_after(std::int32_t last, int n) const {
  const llama_vocab* vocab = llama_model_get_vocab(model_);
  const int n_vocab = llama_vocab_n_tokens(vocab);
  llama_token t = last;
  std::vector<std::string> pieces;
  for (int k = 0; k < n; ++k) {
    t = (t + 1) % n_vocab;
    if (llama_vocab_is_eog(vocab, t)) break;
    char buf[256];
    const int len = llama_token_to_piece(vocab, t, buf, sizeof buf, 0, false);
    pieces.emplace_back(buf, static_cast<size_t>(len));
  }
  return pieces;
}

std::string Oracle::expected_text(const std::string& prompt, int n) const {
  return expected_text_after(tokenize(prompt).back(), n);
}

std::string Oracle::expected_reply(const std::string& prompt, int n) const {
  std::string wire;
  append_escaped(wire, expected_text(prompt, n));
  return wire;
}

std::string Oracle::long_prompt(int n_words, const std::string& last_word) {
  std::string s;
  for (int i = 0; i < n_words; ++i) s += i == 0 ? "hello" : " hello";
  return s + " " + last_word;
}

bool oracle_agrees(std::int32_t token, double agree) {
  if (agree >= 1.0) return true;
  std::uint64_t h = 0x9E3779B97F4A7C15ull * (static_cast<std::uint64_t>(token) + 1);  // splitmix64's finish
  h = (h ^ (h >> 30)) * 0xBF58476D1CE4E5B9ull;
  h = (h ^ (h >> 27)) * 0x94D049BB133111EBull;
  h ^= h >> 31;
  return static_cast<double>(h >> 11) * (1.0 / 9007199254740992.0) < agree;
}

}  // namespace uma
