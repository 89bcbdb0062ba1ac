// SamplingParams: how one request picks its next token. Plain data, filled at the protocol edge;
// the runtime turns it into a llama.cpp sampler chain (one per sequence).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace uma {

struct SamplingParams {
  float temperature = 0.0f;  // <= 0: greedy
  std::int32_t top_k = 0;    // <= 0: off
  float top_p = 1.0f;        // >= 1: off
  float min_p = 0.0f;        // <= 0: off
  float repeat_penalty = 1.0f;
  float frequency_penalty = 0.0f;
  float presence_penalty = 0.0f;
  std::int32_t penalty_last_n = 64;
  std::uint32_t seed = 0xFFFFFFFFu;  // kRandomSeed (LLAMA_DEFAULT_SEED): random
  // GBNF (root rule `root`) every sampled token must keep matching; empty: none. Front ends fill it
  // from a JSON schema (chat/structured_output.h) or take it as given. A constrained request is
  // sampled on the host (the grammar runs there), first in its chain.
  std::string grammar;
  // Lazy: the grammar constrains nothing until the output matches one of `grammar_triggers`
  // (regexes; a tool call's marker), then holds from the match on. Otherwise `grammar_prefill`
  // is text the grammar's root starts with that the prompt already holds (a chat template's
  // generation prompt): the grammar reads its tokens before the first pick.
  bool grammar_lazy = false;
  std::vector<std::string> grammar_triggers;
  std::string grammar_prefill;
  // -1: none. 0..kMaxTopLogprobs: report each generated token's log-probability (of the model's
  // distribution, before temperature and filters) and this many most likely alternatives. Such a
  // request reads its logits row on the host (never device-sampled).
  std::int32_t logprobs = -1;
  // Report the tokens whose text each event releases (as LogprobEntry with only `chosen.token`),
  // without computing log-probabilities: what a gateway needs to resume a stream elsewhere.
  bool report_tokens = false;
  // End-of-generation: never picked (vLLM's and llama-server's ignore_eos: the output runs to
  // max_tokens or a stop string), or not before min_tokens tokens were generated (vLLM's
  // min_tokens, which holds back stop_token_ids too).
  bool ignore_eos = false;
  std::int32_t min_tokens = 0;
  // Tokens that end the generation as the model's own end does (vLLM's stop_token_ids).
  std::vector<std::int32_t> stop_token_ids;
  // Added to a token's logit before anything else picks (OpenAI's logit_bias; -inf: never). A text
  // bias applies to each token of its text (llama-server's ["text", bias] form), tokenized by the
  // runtime.
  struct TokenBias {
    std::int32_t token = 0;
    float bias = 0.0f;
  };
  std::vector<TokenBias> logit_bias;
  std::vector<std::pair<std::string, float>> text_bias;
};
inline constexpr std::size_t kMaxStopTokenIds = 64;
inline constexpr std::size_t kMaxLogitBias = 1024;
inline constexpr std::int32_t kMaxTopLogprobs = 20;
inline constexpr std::uint32_t kRandomSeed = 0xFFFFFFFFu;

// One token and its log-probability under the model's distribution for that step.
struct TokenLogprob {
  std::int32_t token = -1;
  std::string text;  // the token's bytes (may be part of a UTF-8 code point)
  float logprob = 0.0f;
};
// A generated token's log-probability and the most likely alternatives (SamplingParams::logprobs).
struct LogprobEntry {
  TokenLogprob chosen;
  std::vector<TokenLogprob> top;  // most likely first
};

// A JSON schema (text) to the GBNF that enforces it, or an error (chat/structured_output.h's, given
// to the front ends by the daemon: they know no llama.cpp). Empty: structured output unavailable.
using SchemaToGrammar = std::function<Status(const std::string& schema_json, std::string* gbnf)>;

}  // namespace uma
