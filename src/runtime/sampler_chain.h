// A request's SamplingParams as a llama.cpp sampler chain: logit biases and the end-of-generation
// guards (ignore_eos, min_tokens) first, then the grammar (every later sampler sees only the
// tokens it allows), then penalties, filters, temperature and the pick. One chain per
// sequence, owned by the runtime (llama_runtime.cc), which frees it with llama_sampler_free.
#pragma once

#include <llama.h>

#include <vector>

#include "serve/sampling.h"

namespace uma {

// Null when the grammar does not parse (or does not start with its prefill).
llama_sampler* make_sampler_chain(const SamplingParams& p, const llama_vocab* vocab);
// The chain is greedy alone (sample() may take the argmax itself); asked of the chain, so the
// answer moves with a parked sampler to whichever sequence id it resumes under.
bool greedy_only(llama_sampler* chain);
// The chain is greedy over every token but the end-of-generation ones (ignore_eos alone): the
// device can pick it with its ends masked (device_greedy.h).
bool greedy_ignoring_end(llama_sampler* chain);
// The vocabulary's end-of-generation tokens (found once per vocabulary).
const std::vector<llama_token>& end_tokens(const llama_vocab* vocab);

}  // namespace uma
