#include "sched/speculation.h"

#include <algorithm>
#include <cmath>
#include <queue>

namespace uma {

std::vector<Token> lookup_draft(std::span<const Token> tokens, std::int32_t k_max, const LookupConfig& config) {
  const auto size = static_cast<std::int64_t>(tokens.size());
  const std::int64_t n_max = std::min<std::int64_t>(config.n_max, size - 1);
  if (k_max <= 0 || n_max < config.n_min || config.n_min < 1) return {};
  const std::int64_t lowest = std::max<std::int64_t>(0, size - config.window);
  // Scan backwards for an earlier end `e` (exclusive) of the suffix: the first with n_max tokens
  // matching wins; else the latest with the longest match of at least n_min.
  std::int64_t best_end = -1, best_len = 0;
  for (std::int64_t e = size - 1; e - config.n_min >= lowest; --e) {
    std::int64_t len = 0;
    while (len < n_max && e - 1 - len >= lowest && tokens[static_cast<std::size_t>(e - 1 - len)] == tokens[static_cast<std::size_t>(size - 1 - len)]) ++len;
    if (len > best_len && len >= config.n_min) {
      best_len = len;
      best_end = e;
      if (len == n_max) break;
    }
  }
  if (best_end < 0) return {};
  const std::int64_t n = std::min<std::int64_t>(k_max, size - best_end);
  return {tokens.begin() + best_end, tokens.begin() + best_end + n};
}

std::vector<Token> prediction_draft(std::span<const Token> output, std::span<const Token> prediction, std::int32_t k_max,
                                    std::size_t* cursor, const LookupConfig& config) {
  if (k_max <= 0 || prediction.empty()) return {};
  auto from = [&](std::size_t at) -> std::vector<Token> {
    *cursor = at;
    const std::size_t n = std::min<std::size_t>(static_cast<std::size_t>(k_max), prediction.size() - at);
    return {prediction.begin() + static_cast<std::ptrdiff_t>(at), prediction.begin() + static_cast<std::ptrdiff_t>(at + n)};
  };
  if (output.size() < prediction.size() && std::equal(output.begin(), output.end(), prediction.begin())) return from(output.size());
  const std::int64_t n_max = std::min<std::int64_t>(config.n_max, static_cast<std::int64_t>(output.size()));
  for (std::int64_t n = n_max; n >= config.n_min && n >= 1; --n) {
    const std::span<const Token> suffix = output.last(static_cast<std::size_t>(n));
    // Ends (exclusive) of a match, at or past the cursor first, then from the start.
    for (const std::size_t start : {*cursor, std::size_t{0}}) {
      for (std::size_t e = std::max<std::size_t>(start, static_cast<std::size_t>(n)); e < prediction.size(); ++e) {
        if (std::equal(suffix.begin(), suffix.end(), prediction.begin() + static_cast<std::ptrdiff_t>(e) - n)) return from(e);
      }
      if (start == 0) break;
    }
  }
  return {};
}

DraftPlan plan_drafts(const DraftPlanInput& in) {
  DraftPlan plan;
  plan.k.assign(in.offers.size(), 0);
  plan.proposed.assign(in.offers.size(), 0);
  plan.expected_tokens = in.base_tokens;
  // The next draft token of each offer, by the probability that it is accepted: a^(k+1) for the
  // (k+1)-th, which needs all before it.
  struct Next {
    double p;
    std::size_t offer;
    bool operator<(const Next& o) const { return p < o.p; }
  };
  std::priority_queue<Next> next;
  bool any = false;
  for (std::size_t i = 0; i < in.offers.size(); ++i) {
    const DraftOffer& o = in.offers[i];
    if (o.available <= 0) continue;
    any = true;
    if (o.accept >= in.min_accept) next.push({o.accept, i});
  }
  if (!any || in.max_rows <= 0 || !in.tick_ms) return plan;
  const double t0 = in.tick_ms(0);
  double t = t0;
  double tokens = in.base_tokens;
  double drafting = 0.0;  // the drafting the plan took so far (a draft model's steps)
  auto t_with = [&](const Next& n) { return in.tick_ms(plan.rows + 1) + in.offers[n.offer].ms_per_token + drafting + in.fixed_ms; };
  auto take = [&](const Next n, bool filling) {  // a copy: it pops the queue
    next.pop();
    const std::size_t i = n.offer;
    // A filled row's verification is paid for the shape: its drafting, where it costs, is worth
    // it while its token pays for that alone at the tick's rate; after that it is a pad.
    const bool pad = filling && in.offers[i].ms_per_token > 0 && !(n.p * t > in.offers[i].ms_per_token * tokens);
    tokens += pad ? 0.0 : n.p;
    drafting += pad ? 0.0 : in.offers[i].ms_per_token;
    plan.rows++;
    plan.k[i]++;
    plan.proposed[i] += pad ? 0 : 1;
    t = in.tick_ms(plan.rows) + drafting + in.fixed_ms;
    const double p_next = pad ? 0.0 : n.p * in.offers[i].accept;
    if (plan.k[i] < in.offers[i].available && (p_next >= in.min_accept || in.fill_to > 0)) next.push({p_next, i});
  };
  while (!next.empty() && plan.rows < in.max_rows) {
    const Next n = next.top();
    if (n.p < in.min_accept) break;  // only a fill takes those
    // Worth it while the expected tokens per ms rise: (T + p) / (t + dt) > T / t (the first row's
    // dt without the fixed cost, which the whole plan must pay back).
    const double dt = t_with(n) - t - (plan.rows == 0 ? in.fixed_ms : 0.0);
    if (!(t > 0) || n.p * t <= dt * tokens) break;
    take(n, false);
  }
  const DraftPlan unfilled = plan;
  const double unfilled_tokens = tokens, unfilled_t = t;
  std::int32_t fill = std::min(in.fill_to, in.max_rows);
  if (in.fill_to_arm_top && plan.rows > 0) {
    std::int32_t top = 1;
    while (top < plan.rows) top = 2 * top + 1;
    fill = std::min(fill, top);
  }
  while (plan.rows > 0 && !next.empty() && plan.rows < fill) {
    const Next n = next.top();
    if (in.offers[n.offer].ms_per_token > 0 && plan.proposed[n.offer] == 0) {
      next.pop();  // pads go after a proposal, never alone
      continue;
    }
    take(n, true);
  }
  if (plan.rows > unfilled.rows && !(tokens * t0 > in.base_tokens * t)) {  // the rows filled in do not pay
    plan = unfilled;
    tokens = unfilled_tokens;
    t = unfilled_t;
  }
  if (plan.rows > 0 && in.fixed_ms > 0 && !(tokens * t0 > in.base_tokens * t)) {
    plan.decline();  // the rows pay, not the fixed cost with them
    tokens = in.base_tokens;
  }
  plan.expected_tokens = tokens;
  plan.declined = plan.rows == 0;
  return plan;
}

DraftPlan plan_uniform_drafts(const DraftPlanInput& in) {
  DraftPlan plan;
  plan.k.assign(in.offers.size(), 0);
  plan.proposed.assign(in.offers.size(), 0);
  plan.expected_tokens = in.base_tokens;
  plan.declined = true;
  const auto n = static_cast<std::int32_t>(in.offers.size());
  if (n == 0 || !in.tick_ms || in.max_rows < n) return plan;
  const double t0 = in.tick_ms(0);
  if (!(t0 > 0)) return plan;
  const std::int32_t k_max = in.max_rows / n;
  // Per K: the tokens its rows are expected to add (a^1 + ... + a^min(K, available) an offer) and
  // the drafting they cost, both built up one K at a time.
  std::vector<double> reach(in.offers.size(), 1.0);  // a^K of each offer, while K <= available
  double tokens = in.base_tokens, drafting = 0.0;
  std::int32_t best_k = 0, fill_k = 0;
  double best_rate = in.base_tokens / t0, best_tokens = in.base_tokens;
  const std::int32_t fill = in.fill_to > 0 ? std::min(in.fill_to, in.max_rows) / n : 0;
  double fill_tokens = 0;
  for (std::int32_t k = 1; k <= k_max; ++k) {
    for (std::size_t i = 0; i < in.offers.size(); ++i) {
      const DraftOffer& o = in.offers[i];
      if (k > o.available) continue;  // a pad
      reach[i] *= o.accept;
      tokens += reach[i];
      drafting += o.ms_per_token;
    }
    const double t = in.tick_ms(n * k) + drafting + in.fixed_ms;
    if (!(t > 0)) break;
    const double rate = tokens / t;
    if (rate > best_rate) best_rate = rate, best_k = k, best_tokens = tokens;
    if (k <= fill && rate > in.base_tokens / t0) fill_k = k, fill_tokens = tokens;
  }
  const std::int32_t k = fill > 0 && fill_k > best_k ? fill_k : best_k;
  if (k == 0) return plan;
  for (std::size_t i = 0; i < in.offers.size(); ++i) {
    plan.k[i] = k;
    plan.proposed[i] = std::min(k, std::max(in.offers[i].available, 0));
  }
  plan.rows = n * k;
  plan.expected_tokens = k == best_k ? best_tokens : fill_tokens;
  plan.declined = false;
  return plan;
}

double idle_acceptance(double estimate) {
  return estimate < kAcceptancePrior ? estimate + 0.002 * (kAcceptancePrior - estimate) : estimate;
}

double update_acceptance(double estimate, std::int32_t drafted, std::int32_t accepted) {
  // Each verified token moves the estimate by a fifth of its surprise: the accepted ones towards
  // 1, the first rejected one towards 0 (those after it were never tested).
  const std::int32_t tested = std::min(drafted, accepted + 1);
  for (std::int32_t i = 0; i < tested; ++i) estimate += 0.2 * ((i < accepted ? 1.0 : 0.0) - estimate);
  return std::clamp(estimate, 0.0, 1.0);
}

}  // namespace uma
