// Oracle: the oracle model's expected output, computed with the model's own tokenizer. For a
// prompt whose last token is t, greedy generation yields t+1, t+2, ... (docs/ARCHITECTURE.md,
// "Testing"); the expected text is those pieces run through the same UTF-8 assembly the daemon
// applies, and the expected newline-protocol line is that text escaped.
// Used by the end-to-end tests (tests/e2e) and the soak driver (tools/soak).
//
// Ownership: owns a vocabulary-only llama_model, freed in the destructor. Thread-safety: const
// methods only read the vocabulary; callers that share one Oracle across threads serialise calls
// (llama.cpp does not document its tokenizer as thread-safe).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

struct llama_model;

namespace uma {

// Whether an oracle model built with `agree` < 1 (uma-mkmodel --agree: a draft for an oracle
// target) predicts t + 1 after token t, as the oracle does. Deterministic per token id, the same
// for every shape and seed: a draft and the target it agrees with are built apart.
bool oracle_agrees(std::int32_t token, double agree);

class Oracle {
 public:
  explicit Oracle(const std::string& model_path);  // loads the vocabulary only; throws on failure
  ~Oracle();
  Oracle(const Oracle&) = delete;
  Oracle& operator=(const Oracle&) = delete;

  std::vector<std::int32_t> tokenize(const std::string& text) const;
  // The reply line (without '\n') umad must send for `prompt` when it generates n tokens.
  std::string expected_reply(const std::string& prompt, int n) const;
  // The generated text itself (what the JSON protocol carries), and its token pieces. The pieces
  // stop early at an end-of-generation token (then fewer than n: the reason is "stop").
  std::string expected_text(const std::string& prompt, int n) const;
  std::vector<std::string> expected_pieces(const std::string& prompt, int n) const;
  // The same for a prompt given as token ids, by its last token.
  std::string expected_text_after(std::int32_t last, int n) const;
  // A prompt of roughly n tokens: " word" repeated, ending in `last_word`.
  static std::string long_prompt(int n_words, const std::string& last_word);

 private:
  std::vector<std::string> pieces_after(std::int32_t last, int n) const;
  ::llama_model* model_ = nullptr;
};

}  // namespace uma
