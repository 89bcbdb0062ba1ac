// The batching policy: who decodes and who prefills how much in one tick. A pure function of the
// sessions' states, so it can be read in a minute and tested without a model.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace uma {

// One active session as the policy sees it. Candidates come in round-robin order (the scheduler
// rotates the starting point every tick), so "first come" here means "its turn".
struct Candidate {
  bool decoding = false;              // has a sampled token waiting to be fed back
  std::int32_t prompt_remaining = 0;  // prompt tokens not yet in KV (prefill sessions)
  bool overdue = false;               // decoding and past its inter-token deadline
};

struct PolicyInput {
  std::int32_t budget = 0;       // prefill tokens this tick may carry next to decode (TickBudget)
  std::int32_t capacity = 0;     // hard limit: llama's n_batch
  std::int32_t min_prefill = 0;  // prefill tokens granted even when decode used the budget
  bool guard_fired_last_tick = false;
};

struct TickPlan {
  std::vector<std::size_t> decode;                           // candidate indices, 1 token each
  std::vector<std::pair<std::size_t, std::int32_t>> prefill;  // candidate index, chunk length
  bool guard_fired = false;  // prefill skipped to protect overdue streams
};

// v1 (seed 000): (1) one token for every decoding session; (2) if a stream is overdue, skip
// prefill this tick (never two ticks running, so prefill cannot starve); (3) otherwise spend the
// prefill budget (at least min_prefill) on prefill chunks, round-robin; with nobody decoding, the
// budget is the whole capacity (the budget exists to protect running streams, and there are none).
TickPlan plan_tick(std::span<const Candidate> sessions, const PolicyInput& in);

}  // namespace uma
