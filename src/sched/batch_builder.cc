#include "sched/batch_builder.h"

#include <algorithm>

namespace uma {

void build_batch(const TickPlan& plan, std::span<Session* const> order, BuiltBatch& out) {
  out.clear();
  // Decode rows in sequence-id order: with per-sequence KV streams llama.cpp splits a batch into
  // one ubatch per run of consecutive sequence ids.
  std::vector<std::size_t>& decode = out.decode_order;
  decode.assign(plan.decode.begin(), plan.decode.end());
  std::sort(decode.begin(), decode.end(), [&](std::size_t a, std::size_t b) { return order[a]->seq < order[b]->seq; });
  for (std::size_t i : decode) {
    Session* s = order[i];
    out.rows.push_back({s, static_cast<std::int32_t>(out.entries.size())});
    out.entries.push_back({s->last_token(), s->n_past, s->seq, true});
    out.decoded.push_back(s);
  }
  for (const auto& [i, length] : plan.prefill) {
    Session* s = order[i];
    const bool completes = length == s->prompt_remaining();
    for (std::int32_t k = 0; k < length; ++k) {
      const std::int32_t p = s->n_prefilled + k;
      const bool want_logits = completes && k == length - 1;
      if (want_logits) out.rows.push_back({s, static_cast<std::int32_t>(out.entries.size())});
      out.entries.push_back({s->tokens[static_cast<std::size_t>(p)], p, s->seq, want_logits});
    }
    out.prefilled.push_back({s, length});
  }
}

}  // namespace uma
