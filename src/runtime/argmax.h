// argmax_first: the index of the first largest value of a logits row, i.e. the token llama.cpp's
// greedy sampler picks (`llama_sampler_init_greedy` keeps the first of equal maxima).
// Pure function, no allocation; thread-safe.
//
// Why not the obvious loop: `if (row[t] > row[best]) best = t` carries `best` from one element to
// the next, so the compiler cannot vectorise it; over a 32k vocabulary at 64 rows a tick that was
// ~2 ms of host time between two decodes. Here the row's maximum is found chunk by chunk with
// independent lanes (vectorised at -O2), and only the winning chunk is scanned for the index.
#pragma once

#include <cstdint>

namespace uma {

namespace argmax_detail {
constexpr std::int32_t kLanes = 16;
constexpr std::int32_t kChunk = 512;  // a multiple of kLanes

inline float chunk_max(const float* p) {
  float lane[kLanes];
  for (std::int32_t k = 0; k < kLanes; ++k) lane[k] = p[k];
  for (std::int32_t t = kLanes; t < kChunk; t += kLanes) {
    for (std::int32_t k = 0; k < kLanes; ++k) lane[k] = p[t + k] > lane[k] ? p[t + k] : lane[k];
  }
  float m = lane[0];
  for (std::int32_t k = 1; k < kLanes; ++k) m = lane[k] > m ? lane[k] : m;
  return m;
}
}  // namespace argmax_detail

// n > 0. NaNs are never picked over a number that precedes them (as the scalar loop).
inline std::int32_t argmax_first(const float* row, std::int32_t n) {
  using argmax_detail::kChunk;
  std::int32_t best = 0;  // index of the best value seen so far
  std::int32_t t = 0;
  for (; t + kChunk <= n; t += kChunk) {
    // Only a chunk whose maximum beats the best so far can move it; scan that chunk alone.
    if (argmax_detail::chunk_max(row + t) > row[best]) {
      for (std::int32_t i = t; i < t + kChunk; ++i) {
        if (row[i] > row[best]) best = i;
      }
    }
  }
  for (; t < n; ++t) {
    if (row[t] > row[best]) best = t;
  }
  return best;
}

}  // namespace uma
