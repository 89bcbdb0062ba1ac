#include "runtime/sampler_chain.h"

#include <cctype>
#include <cstring>
#include <exception>
#include <vector>

namespace uma {
namespace {

// The grammar sampler of `p`; null when the grammar does not parse or refuses its prefill.
llama_sampler* make_grammar(const SamplingParams& p, const llama_vocab* vocab) {
  if (p.grammar_lazy) {
    std::vector<const char*> patterns;
    for (const std::string& t : p.grammar_triggers) patterns.push_back(t.c_str());
    return llama_sampler_init_grammar_lazy_patterns(vocab, p.grammar.c_str(), "root", patterns.data(), patterns.size(),
                                                    nullptr, 0);
  }
  llama_sampler* g = llama_sampler_init_grammar(vocab, p.grammar.c_str(), "root");
  if (g == nullptr || p.grammar_prefill.empty()) return g;
  std::vector<llama_token> tokens(p.grammar_prefill.size() + 2);
  const int n = llama_tokenize(vocab, p.grammar_prefill.data(), static_cast<int32_t>(p.grammar_prefill.size()),
                               tokens.data(), static_cast<int32_t>(tokens.size()), /*add_special=*/false,
                               /*parse_special=*/true);
  try {
    for (int i = 0; i < n; ++i) {
      char piece[8];
      // A tokenizer may put a space before the first special token; the text has none (llama.cpp's
      // common sampler skips it the same way).
      if (i == 0 && llama_token_to_piece(vocab, tokens[0], piece, sizeof piece, 0, true) >= 1 &&
          std::isspace(static_cast<unsigned char>(piece[0])) && !std::isspace(static_cast<unsigned char>(p.grammar_prefill[0]))) {
        continue;
      }
      llama_sampler_accept(g, tokens[static_cast<std::size_t>(i)]);
    }
  } catch (const std::exception&) {  // the grammar does not start with the prefill
    llama_sampler_free(g);
    return nullptr;
  }
  return n < 0 ? (llama_sampler_free(g), nullptr) : g;
}

}  // namespace

llama_sampler* make_sampler_chain(const SamplingParams& p, const llama_vocab* vocab) {
  const std::int32_t n_vocab = llama_vocab_n_tokens(vocab);
  llama_sampler* chain = llama_sampler_chain_init(llama_sampler_chain_default_params());
  if (!p.grammar.empty()) {
    // First: every later sampler sees only the tokens the grammar allows.
    llama_sampler* g = make_grammar(p, vocab);
    if (g == nullptr) {
      llama_sampler_free(chain);
      return nullptr;
    }
    llama_sampler_chain_add(chain, g);
  }
  if (p.temperature <= 0.0f) {
    // A request that reports logprobs needs its logits row on the host: a chain of more than
    // greedy alone is never given to the device (and the flag moves with the chain when parked).
    if (p.logprobs >= 0) llama_sampler_chain_add(chain, llama_sampler_init_top_k(1));
    llama_sampler_chain_add(chain, llama_sampler_init_greedy());
    return chain;
  }
  if (p.repeat_penalty != 1.0f || p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f) {
    llama_sampler_chain_add(chain, llama_sampler_init_penalties(n_vocab, p.penalty_last_n, p.repeat_penalty,
                                                                 p.frequency_penalty, p.presence_penalty));
  }
  if (p.top_k > 0) llama_sampler_chain_add(chain, llama_sampler_init_top_k(p.top_k));
  if (p.top_p < 1.0f) llama_sampler_chain_add(chain, llama_sampler_init_top_p(p.top_p, 1));
  if (p.min_p > 0.0f) llama_sampler_chain_add(chain, llama_sampler_init_min_p(p.min_p, 1));
  llama_sampler_chain_add(chain, llama_sampler_init_temp(p.temperature));
  llama_sampler_chain_add(chain, llama_sampler_init_dist(p.seed));
  return chain;
}

bool greedy_only(llama_sampler* chain) {
  return llama_sampler_chain_n(chain) == 1 && std::strcmp(llama_sampler_name(llama_sampler_chain_get(chain, 0)), "greedy") == 0;
}

}  // namespace uma
