// The oracle model's expected output, computed with the model's own tokenizer: for a prompt whose
// last token is t, greedy generation yields t+1, t+2, ... The expected wire line is those pieces
// run through the same UTF-8 assembly and newline escaping the daemon applies.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

struct llama_model;

namespace uma::test {

class Oracle {
 public:
  explicit Oracle(const std::string& model_path);  // loads the vocabulary only
  ~Oracle();
  std::vector<std::int32_t> tokenize(const std::string& text) const;
  // The reply line (without '\n') umad must send for `prompt` when it generates n tokens.
  std::string expected_reply(const std::string& prompt, int n) const;
  // The generated text itself (what the JSON protocol carries), and its token pieces.
  std::string expected_text(const std::string& prompt, int n) const;
  std::vector<std::string> expected_pieces(const std::string& prompt, int n) const;
  // A prompt of roughly n tokens: " word" repeated, ending in `last_word`.
  static std::string long_prompt(int n_words, const std::string& last_word);

 private:
  ::llama_model* model_ = nullptr;
};

// The test models' oracle, loaded once per test binary.
const Oracle& oracle();

}  // namespace uma::test
