#include "sched/policy.h"

#include <algorithm>

namespace uma {

TickPlan plan_tick(std::span<const Candidate> sessions, const PolicyInput& in) {
  TickPlan plan;
  std::int32_t used = 0;
  bool overdue = false;
  for (std::size_t i = 0; i < sessions.size(); ++i) {
    if (!sessions[i].decoding || used >= in.capacity) continue;
    plan.decode.push_back(i);
    ++used;
    overdue = overdue || sessions[i].overdue;
  }

  plan.guard_fired = overdue && !in.guard_fired_last_tick;
  if (plan.guard_fired) return plan;

  // With no stream decoding there is no cadence to protect: prefill at full capacity.
  const std::int32_t budget = plan.decode.empty() ? in.capacity : std::max(in.budget, in.min_prefill);
  std::int32_t left = std::min(budget, in.capacity - used);
  for (std::size_t i = 0; i < sessions.size() && left > 0; ++i) {
    if (sessions[i].decoding || sessions[i].prompt_remaining <= 0) continue;
    const std::int32_t chunk = std::min(left, sessions[i].prompt_remaining);
    plan.prefill.emplace_back(i, chunk);
    left -= chunk;
  }
  return plan;
}

}  // namespace uma
