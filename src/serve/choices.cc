#include "serve/choices.h"

#include <algorithm>

namespace uma {

std::vector<Request> expand_choices(Request first, std::int32_t n, const std::vector<PromptInput>& prompts) {
  n = std::max<std::int32_t>(1, n);
  const RequestId id = first.id;
  const std::size_t k = prompts.size();
  const std::int32_t per_prompt = k > 1 ? std::max<std::int32_t>(1, n / static_cast<std::int32_t>(k)) : n;
  std::vector<Request> out;
  out.reserve(static_cast<std::size_t>(n));
  for (std::int32_t i = 0; i < n; ++i) {
    Request q = i + 1 < n ? first : std::move(first);
    q.id = id + static_cast<RequestId>(i);
    if (k > 1) {
      const PromptInput& p = prompts[std::min<std::size_t>(k - 1, static_cast<std::size_t>(i / per_prompt))];
      q.prompt = p.text;
      q.prompt_tokens = p.tokens;
      q.images = p.images;
    }
    if (q.sampling.seed != kRandomSeed) q.sampling.seed += static_cast<std::uint32_t>(i);
    out.push_back(std::move(q));
  }
  return out;
}

}  // namespace uma
