#include "gateway/routing.h"

#include <algorithm>
#include <limits>
#include <vector>

namespace uma::gateway {

namespace {

const cluster::AgentModel* model_of(const Candidate& c, const RouteRequest& r) {
  if (c.agent == nullptr) return nullptr;
  if (r.model.empty()) return c.agent->models.empty() ? nullptr : &c.agent->models.front();
  return c.agent->model(r.model);
}

// The seed's cache level: 0 loaded, then by tier (where the weights must come from).
int cache_level(const cluster::AgentModel& m) {
  if (m.state == cluster::ModelState::kLoaded) return 0;
  if (m.tier == store::Tier::kDram) return 1;
  if (m.tier == store::Tier::kNvme) return 2;
  return 3;
}

}  // namespace

bool parse_policy(std::string_view name, Policy* out) {
  if (name == "predicted") *out = Policy::kPredicted;
  else if (name == "seed") *out = Policy::kSeed;
  else if (name == "round-robin") *out = Policy::kRoundRobin;
  else if (name == "least-loaded") *out = Policy::kLeastLoaded;
  else return false;
  return true;
}

Prediction predict_ttft(const Candidate& c, const RouteRequest& r, const RoutingParams& p) {
  Prediction t;
  const cluster::AgentModel* m = model_of(c, r);
  if (m == nullptr) return t;
  if (m->state != cluster::ModelState::kLoaded) {
    const double bw = c.load_bandwidth_bytes_s > 0.0 ? c.load_bandwidth_bytes_s : p.default_load_bytes_s;
    t.load = static_cast<double>(m->bytes + c.loader_queue_bytes) / bw;
  }
  const cluster::AgentState& a = *c.agent;
  const double rate = a.prefill_tok_s > 0.0 ? a.prefill_tok_s : p.default_prefill_tok_s;
  const std::int64_t ahead = std::max<std::int64_t>(0, a.prefill_backlog_tokens) + std::max<std::int64_t>(0, c.pending_tokens);
  // At least the last prompt token is computed (its logits give the first token).
  const std::int64_t uncached = std::max<std::int64_t>(1, r.prompt_tokens - std::min(c.cached_tokens, r.prompt_tokens));
  t.uncached = uncached;
  t.ahead = ahead;
  t.running = c.running;
  if (c.fit != nullptr && c.fit->samples() >= p.min_fit_samples) {
    const TtftCoefficients k = c.fit->coefficients({0.0, 1.0 / rate, 1.0 / rate, 0.0});
    t.queue = k.per_ahead_s * static_cast<double>(ahead);
    t.prefill = k.fixed_s + k.per_uncached_s * static_cast<double>(uncached) +
                k.per_running_s * static_cast<double>(std::max<std::int64_t>(0, c.running));
    t.fitted = true;
    return t;
  }
  t.queue = static_cast<double>(ahead) / rate;
  t.prefill = static_cast<double>(uncached) / rate;
  // Prompts are cut into ticks of tick_tokens; each tick also pays a fixed cost and, while other
  // streams decode, their decode step: ticks ahead of the request go to Q, its own to P.
  if (a.tick_tokens > 0) {
    const double tick_s = (std::max(0.0, a.tick_fixed_ms) + std::max(0.0, a.decode_tick_ms)) / 1e3;
    const std::int64_t ticks_ahead = ahead / a.tick_tokens;
    const std::int64_t ticks_all = (ahead + uncached + a.tick_tokens - 1) / a.tick_tokens;
    t.queue += static_cast<double>(ticks_ahead) * tick_s;
    t.prefill += static_cast<double>(ticks_all - ticks_ahead) * tick_s;
  }
  return t;
}

double cluster_prefill_tok_s(std::span<const Candidate> candidates, const RouteRequest& r) {
  std::vector<double> rates;
  for (const Candidate& c : candidates) {
    if (model_of(c, r) != nullptr && c.agent->prefill_tok_s > 0.0) rates.push_back(c.agent->prefill_tok_s);
  }
  if (rates.empty()) return 0.0;
  const auto mid = rates.begin() + static_cast<std::ptrdiff_t>(rates.size() / 2);
  std::nth_element(rates.begin(), mid, rates.end());
  return *mid;
}

RouteChoice choose(Policy policy, std::span<const Candidate> candidates, const RouteRequest& r, const RoutingParams& params,
                   std::uint64_t* rr_cursor) {
  // An agent that has not measured its rate yet is predicted at its peers' (same model, likely the
  // same kind of machine), not at a constant that may be off several times either way.
  RoutingParams p = params;
  if (const double known = cluster_prefill_tok_s(candidates, r); known > 0.0) p.default_prefill_tok_s = known;
  std::int64_t cluster_running = 0, cluster_ahead = 0;
  for (const Candidate& c : candidates) {
    cluster_running += c.running;
    cluster_ahead += std::max<std::int64_t>(0, c.agent->prefill_backlog_tokens) + std::max<std::int64_t>(0, c.pending_tokens);
  }
  RouteChoice best;
  double best_score = std::numeric_limits<double>::infinity();
  const int n = static_cast<int>(candidates.size());
  if (policy == Policy::kRoundRobin) {
    // The next eligible agent after the cursor.
    for (int k = 0; k < n; ++k) {
      const int i = static_cast<int>((*rr_cursor + static_cast<std::uint64_t>(k)) % static_cast<std::uint64_t>(n));
      if (model_of(candidates[static_cast<std::size_t>(i)], r) == nullptr) continue;
      *rr_cursor = static_cast<std::uint64_t>(i) + 1;
      RouteChoice rc{i, predict_ttft(candidates[static_cast<std::size_t>(i)], r, p)};
      rc.predicted.cluster_running = cluster_running;
      rc.predicted.cluster_ahead = cluster_ahead;
      return rc;
    }
    return best;
  }
  for (int i = 0; i < n; ++i) {
    const Candidate& c = candidates[static_cast<std::size_t>(i)];
    const cluster::AgentModel* m = model_of(c, r);
    if (m == nullptr) continue;
    const Prediction t = predict_ttft(c, r, p);
    double score = 0.0;
    switch (policy) {
      case Policy::kPredicted: score = t.total(); break;
      case Policy::kSeed: {
        const double hit = r.prompt_tokens > 0 ? static_cast<double>(std::min(c.cached_tokens, r.prompt_tokens)) /
                                                     static_cast<double>(r.prompt_tokens)
                                               : 0.0;
        score = p.alpha * cache_level(*m) - p.beta * hit + p.gamma * t.queue + p.delta * t.load;
        break;
      }
      case Policy::kLeastLoaded:
        // Requests running and waiting, then the backlog (with this gateway's own dispatches).
        score = static_cast<double>(c.agent->active_sessions + c.agent->queued_sessions) +
                static_cast<double>(c.agent->prefill_backlog_tokens + c.pending_tokens) * 1e-9;
        break;
      case Policy::kRoundRobin: break;
    }
    if (score < best_score) {
      best_score = score;
      best = RouteChoice{i, t};
    }
  }
  best.predicted.cluster_running = cluster_running;
  best.predicted.cluster_ahead = cluster_ahead;
  return best;
}

}  // namespace uma::gateway
