#include "sched/policy.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace uma {

std::vector<std::size_t> prefill_order(std::span<const Candidate> sessions) {
  std::vector<std::size_t> prefillers;
  for (std::size_t i = 0; i < sessions.size(); ++i) {
    if (!sessions[i].decoding && sessions[i].prompt_remaining > 0) prefillers.push_back(i);
  }
  // Within a rank: least slack first (earliest deadline, counting the work left), late prompts
  // included. A prompt's target counts the prompts that arrived before it (Scheduler::ttft_target),
  // so this is about arrival order; putting late prompts last would starve the earliest arrival
  // of a burst behind every later one. Stable: round-robin order among equals.
  std::stable_sort(prefillers.begin(), prefillers.end(), [&](std::size_t a, std::size_t b) {
    const Candidate& x = sessions[a];
    const Candidate& y = sessions[b];
    if (x.rank != y.rank) return x.rank < y.rank;
    return x.slack_ms < y.slack_ms;
  });
  return prefillers;
}

TickPlan plan_tick(std::span<const Candidate> sessions, const PolicyInput& in) {
  TickPlan plan;
  // Stable sorts keep round-robin order among equals.
  std::vector<std::size_t> decoders;
  for (std::size_t i = 0; i < sessions.size(); ++i) {
    if (sessions[i].decoding) decoders.push_back(i);
  }
  std::stable_sort(decoders.begin(), decoders.end(),
                   [&](std::size_t a, std::size_t b) { return sessions[a].rank < sessions[b].rank; });
  const std::vector<std::size_t> prefillers = prefill_order(sessions);

  std::int32_t used = 0;
  bool overdue = false;
  for (std::size_t i : decoders) {
    if (used >= in.capacity) break;
    plan.decode.push_back(i);
    ++used;
    if (sessions[i].overdue && !overdue) plan.guard_for = i;
    overdue = overdue || sessions[i].overdue;
  }
  std::sort(plan.decode.begin(), plan.decode.end());  // batch order stays round-robin order

  plan.guard_fired = overdue && !in.guard_fired_last_tick;
  if (plan.guard_fired) return plan;

  const std::int32_t capacity = plan.decode.empty() ? std::max(in.capacity, in.idle_capacity) : in.capacity;
  const std::int32_t budget = plan.decode.empty() ? capacity : std::max(in.budget, in.min_prefill);
  std::int32_t left = std::min(budget, capacity - used);
  std::int32_t background_left = plan.decode.empty() && in.background_idle_cap > 0 ? in.background_idle_cap : left;
  // The most one prompt could get in a tick like this one: whole_prompts cuts a prompt only when
  // it is longer (else a prompt longer than what decode leaves free would wait forever).
  const std::int32_t tick_room = left;
  const std::int32_t background_room = std::min(left, background_left);
  for (std::size_t i : prefillers) {
    if (left <= 0) break;
    const bool bg = sessions[i].background;
    const std::int32_t room = std::min(left, bg ? background_left : left);
    const std::int32_t want = sessions[i].prompt_remaining;
    std::int32_t chunk = std::min(room, want);
    if (in.whole_prompts && chunk < want) {
      // With nobody decoding, a prompt put off whole would make the streams this tick starts wait
      // out its whole prefill at their first gap; its rest beside their first rows costs a pass.
      const bool never_whole = want > (bg ? background_room : tick_room) || plan.decode.empty();
      const bool worth_a_pass = plan.prefill.empty() || chunk >= in.min_prefill;
      if (!never_whole || !worth_a_pass) continue;
    }
    if (chunk <= 0) continue;
    if (bg) background_left -= chunk;
    plan.prefill.emplace_back(i, chunk);
    left -= chunk;
  }
  return plan;
}

double gather_window_ms(bool anyone_decoding, double predicted_tick_ms, double max_ms) {
  if (anyone_decoding || predicted_tick_ms <= 0.0 || max_ms <= 0.0) return 0.0;
  return std::min(max_ms, kGatherShare * predicted_tick_ms);
}

SloBudget slo_prefill_budget(const SloBudgetInput& in) {
  SloBudget out;
  std::int32_t total = 0;
  for (const PromptWait& w : in.prompts) total += std::max(w.remaining, 0);
  const std::int32_t most = std::min(total, in.capacity);
  if (most <= 0) return out;
  const std::int32_t least = std::clamp(in.floor, 1, most);
  // Candidates: a geometric grid from the floor to the most, plus every prompt boundary (the
  // exact amount that finishes a prompt this tick).
  std::vector<std::int32_t> candidates;
  for (double p = least; p < most; p = std::max(p + 1, p * 1.08)) candidates.push_back(static_cast<std::int32_t>(p));
  candidates.push_back(most);
  std::int32_t cum = 0;
  for (const PromptWait& w : in.prompts) {
    cum += std::max(w.remaining, 0);
    if (cum >= least && cum <= most) candidates.push_back(cum);
  }
  auto evaluate = [&](std::int32_t p, SloBudget& r) {
    const double tick = std::max(in.tick_ms(p), 0.0);
    r.tokens = p;
    r.stream_ratio = in.tbt_target_ms > 0 ? (in.stream_waited_ms + tick) / in.tbt_target_ms : 0.0;
    r.prompt_ratio = 0.0;
    std::int64_t c = 0;
    for (const PromptWait& w : in.prompts) {
      if (w.remaining <= 0) continue;
      c += w.remaining;
      const double ticks = std::ceil(static_cast<double>(c) / p);
      const double target = std::max(w.ttft_target_ms, 1.0);
      r.prompt_ratio = std::max(r.prompt_ratio, (w.waited_ms + ticks * tick) / target);
    }
    return std::max(r.stream_ratio, r.prompt_ratio);
  };
  std::vector<std::pair<double, SloBudget>> scored;
  for (std::int32_t p : candidates) {
    SloBudget r;
    const double worst = evaluate(p, r);
    scored.emplace_back(worst, r);
  }
  double best = scored.front().first;
  for (const auto& [worst, r] : scored) best = std::min(best, worst);
  // Within 1% of the best counts as a tie (or anything within every target), and a tie goes to the
  // larger chunk.
  const double tie = in.fill_when_met && best <= 1.0 ? 1.0 : best * 1.01;
  for (const auto& [worst, r] : scored) {
    if (worst <= tie && r.tokens > out.tokens) out = r;
  }
  return out;
}

bool waiting_before(const Waiting& a, const Waiting& b) {
  if (a.rank != b.rank) return a.rank < b.rank;
  return a.waited_ms > b.waited_ms;
}

std::vector<std::size_t> choose_victims(std::span<const VictimCandidate> running, std::int32_t seqs_needed,
                                        std::int32_t cells_needed) {
  std::vector<std::size_t> order(running.size());
  for (std::size_t i = 0; i < running.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    const VictimCandidate& x = running[a];
    const VictimCandidate& y = running[b];
    if (x.rank != y.rank) return x.rank > y.rank;  // kRelaxed first
    if (x.protected_ != y.protected_) return !x.protected_;
    if (x.running_ms != y.running_ms) return x.running_ms < y.running_ms;
    return x.start_order > y.start_order;
  });
  std::vector<std::size_t> chosen;
  for (std::size_t i : order) {
    if (seqs_needed <= 0 && cells_needed <= 0) break;
    chosen.push_back(i);
    seqs_needed -= 1;
    cells_needed -= running[i].cells;
  }
  if (seqs_needed > 0 || cells_needed > 0) chosen.clear();
  return chosen;
}

ParkMode choose_park_mode(const ParkCost& cost, ParkPreference pref) {
  const bool fits = cost.kv_bytes <= cost.host_bytes_free;
  if (pref == ParkPreference::kRecompute || !fits || cost.kv_tokens == 0) return ParkMode::kRecompute;
  if (pref == ParkPreference::kSave) return ParkMode::kSave;
  // Copying host memory runs at several GB/s; 1 ms per MB out and back is a safe overestimate.
  constexpr double kCopyMsPerMb = 1.0;
  const double save_ms = kCopyMsPerMb * static_cast<double>(cost.kv_bytes) / 1e6;
  // Until prefill has been measured, assume it is not cheaper than copying.
  const double per_token = cost.ms_per_prefill_token > 0 ? cost.ms_per_prefill_token : 1.0;
  const double recompute_ms = per_token * cost.kv_tokens;
  return save_ms <= recompute_ms ? ParkMode::kSave : ParkMode::kRecompute;
}

}  // namespace uma
