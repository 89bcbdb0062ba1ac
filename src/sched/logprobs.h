// Log-probabilities of a generated token, from the logits row the sampler read: log-softmax of
// the row at the chosen token, and the top_n most likely tokens. The model's distribution for
// that step, before temperature, penalties or filters (what OpenAI's logprobs report). Pure
// arithmetic, unit-tested on synthetic rows (logprobs_test.cc).
#pragma once

#include <cstdint>
#include <span>

#include "serve/request.h"

namespace uma {

// Texts are left empty: the caller names the tokens (the decoder knows their bytes). Most likely
// first; equal logits in token order. An empty row (none on the host) gives an entry with the
// token and logprob 0.
LogprobEntry logprob_entry(std::span<const float> row, std::int32_t chosen, std::int32_t top_n);

}  // namespace uma
