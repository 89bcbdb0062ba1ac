// SamplingParams: how one request picks its next token. Plain data, filled at the protocol edge;
// the runtime turns it into a llama.cpp sampler chain (one per sequence).
#pragma once

#include <cstdint>

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
  std::uint32_t seed = 0xFFFFFFFFu;  // LLAMA_DEFAULT_SEED: random
};

}  // namespace uma
