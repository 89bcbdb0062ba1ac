#include "runtime/sampler_chain.h"

#include <array>
#include <cctype>
#include <cmath>
#include <cstring>
#include <exception>
#include <limits>
#include <mutex>
#include <unordered_map>
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


constexpr const char* kIgnoreEnd = "uma-ignore-end";  // an end guard that never lets go

// Holds `tokens` at -inf until `until` tokens were accepted (ignore_eos: never lets go).
struct EndGuard {
  std::vector<llama_token> tokens;
  std::int32_t until = 0;
  std::int32_t accepted = 0;
};
llama_sampler* make_end_guard(EndGuard g);
llama_sampler_i end_guard_iface() {
  llama_sampler_i i{};
  i.name = [](const llama_sampler* s) {
    return static_cast<const EndGuard*>(s->ctx)->until == std::numeric_limits<std::int32_t>::max() ? kIgnoreEnd : "uma-end-guard";
  };
  i.accept = [](llama_sampler* s, llama_token) { static_cast<EndGuard*>(s->ctx)->accepted++; };
  i.apply = [](llama_sampler* s, llama_token_data_array* cur) {
    const auto* g = static_cast<const EndGuard*>(s->ctx);
    if (g->accepted >= g->until) return;
    for (llama_token t : g->tokens) {
      // Rows are in token order until a sampler sorts them (the guard runs before any does);
      // otherwise the id is looked up.
      const auto at = static_cast<std::size_t>(t);
      if (at < cur->size && cur->data[at].id == t) {
        cur->data[at].logit = -std::numeric_limits<float>::infinity();
        continue;
      }
      for (std::size_t k = 0; k < cur->size; ++k) {
        if (cur->data[k].id == t) cur->data[k].logit = -std::numeric_limits<float>::infinity();
      }
    }
  };
  i.reset = [](llama_sampler* s) { static_cast<EndGuard*>(s->ctx)->accepted = 0; };
  i.clone = [](const llama_sampler* s) { return make_end_guard(*static_cast<const EndGuard*>(s->ctx)); };
  i.free = [](llama_sampler* s) { delete static_cast<EndGuard*>(s->ctx); };
  return i;
}
llama_sampler* make_end_guard(EndGuard g) {
  static llama_sampler_i iface = end_guard_iface();
  return llama_sampler_init(&iface, new EndGuard(std::move(g)));
}

// logit_bias, ignore_eos and min_tokens: before the grammar, the filters and the pick.
void add_biases(llama_sampler* chain, const SamplingParams& p, const llama_vocab* vocab) {
  const std::int32_t n_vocab = llama_vocab_n_tokens(vocab);
  std::vector<llama_logit_bias> biases;
  for (const SamplingParams::TokenBias& b : p.logit_bias) {
    if (b.token >= 0 && b.token < n_vocab) biases.push_back({b.token, b.bias});
  }
  for (const auto& [text, bias] : p.text_bias) {
    std::vector<llama_token> tokens(text.size() + 2);
    const int n = llama_tokenize(vocab, text.data(), static_cast<int32_t>(text.size()), tokens.data(),
                                 static_cast<int32_t>(tokens.size()), /*add_special=*/false, /*parse_special=*/false);
    for (int i = 0; i < n; ++i) biases.push_back({tokens[static_cast<std::size_t>(i)], bias});
  }
  if (!biases.empty()) {
    llama_sampler_chain_add(chain, llama_sampler_init_logit_bias(n_vocab, static_cast<int32_t>(biases.size()), biases.data()));
  }
  if (p.ignore_eos) {
    llama_sampler_chain_add(chain, make_end_guard({end_tokens(vocab), std::numeric_limits<std::int32_t>::max(), 0}));
  }
  if (p.min_tokens > 0) {
    EndGuard g{end_tokens(vocab), p.min_tokens, 0};
    g.tokens.insert(g.tokens.end(), p.stop_token_ids.begin(), p.stop_token_ids.end());
    llama_sampler_chain_add(chain, make_end_guard(std::move(g)));
  }
}

}  // namespace

// A scan of every token, once per vocabulary. Models come and go (an agent's serverless tier), and
// a new vocabulary may take a freed one's address: an entry also holds what identifies its
// vocabulary besides the address, and is scanned again where that differs.
const std::vector<llama_token>& end_tokens(const llama_vocab* vocab) {
  struct Known {
    std::array<std::int32_t, 4> id{};  // n_tokens, eos, eot, bos
    std::vector<llama_token> tokens;
  };
  static std::mutex mu;
  static std::unordered_map<const llama_vocab*, Known> known;
  const std::lock_guard<std::mutex> lock(mu);
  const std::array<std::int32_t, 4> id{llama_vocab_n_tokens(vocab), llama_vocab_eos(vocab), llama_vocab_eot(vocab),
                                       llama_vocab_bos(vocab)};
  auto [it, added] = known.try_emplace(vocab);
  if (added || it->second.id != id) {
    it->second.id = id;
    it->second.tokens.clear();
    for (llama_token t = 0; t < id[0]; ++t) {
      if (llama_vocab_is_eog(vocab, t)) it->second.tokens.push_back(t);
    }
  }
  return it->second.tokens;
}

llama_sampler* make_sampler_chain(const SamplingParams& p, const llama_vocab* vocab) {
  const std::int32_t n_vocab = llama_vocab_n_tokens(vocab);
  llama_sampler* chain = llama_sampler_chain_init(llama_sampler_chain_default_params());
  add_biases(chain, p, vocab);
  if (!p.grammar.empty()) {
    // Every later sampler sees only the tokens the grammar allows.
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

bool greedy_ignoring_end(llama_sampler* chain) {
  return llama_sampler_chain_n(chain) == 2 && std::strcmp(llama_sampler_name(llama_sampler_chain_get(chain, 0)), kIgnoreEnd) == 0 &&
         std::strcmp(llama_sampler_name(llama_sampler_chain_get(chain, 1)), "greedy") == 0;
}

}  // namespace uma
