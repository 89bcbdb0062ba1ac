// Prompt generation for uma-bench. Prompts are built from common English words that are each a
// single token in llama's SentencePiece vocabulary, so "N tokens" is N words (the server's own
// usage count is what the report uses). Seeded: the same seed gives the same prompts.
#pragma once

#include <cstdint>
#include <random>
#include <string>

namespace uma::bench {

class PromptMaker {
 public:
  explicit PromptMaker(std::uint64_t seed) : rng_(seed) {}
  std::string words(int n);  // n random words, space-separated, no leading space
 private:
  std::mt19937_64 rng_;
};

}  // namespace uma::bench
