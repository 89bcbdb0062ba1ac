// A request's choices (OpenAI's `n`, and its prompt array): the scheduler requests one client
// request runs as. Choice i is request id first + i, with its own seed (seed + i when seeded, so
// choices differ from each other and repeat with the same seed) and, with several prompts, prompt
// i / (n / prompts) instead of the request's own. Pure.
#pragma once

#include <cstdint>
#include <vector>

#include "serve/request.h"

namespace uma {

// `n` >= 1 copies of `first` (which has its id), choice 0 first.
std::vector<Request> expand_choices(Request first, std::int32_t n, const std::vector<PromptInput>& prompts);

}  // namespace uma
