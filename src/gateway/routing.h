// Routing: which agent serves a request, as pure functions over a snapshot of the
// cluster and what the gateway knows besides (the prompt tokens each agent holds in KV, matched by
// prefix block; its own dispatches the agents have not reported yet). No I/O and no clock: the
// gateway hands it everything, tests hand it synthetic states.
//
// The default policy makes the seed's score physical: the predicted time to first token, in
// seconds, T = L + Q + P, lowest wins:
//   L  weight load: 0 when the model is loaded, else (its bytes + the loader's queue) / the
//      bandwidth of the tier that holds it;
//   Q  queue: prompt tokens ahead of the request (the agent's backlog plus this gateway's
//      unreported dispatches) / the agent's measured prefill rate;
//   P  prefill of the prompt tokens the agent does not hold / the same rate.
// Once the gateway has measured an agent's answers (gateway/ttft_fit.h: min_fit_samples of them),
// Q and P come from that fit instead — the same quantities, ahead and uncached tokens, plus the
// requests running there (they share the prompt's ticks), with the costs the agent has shown (the
// physical model is the fit's prior).
// `seed` keeps the seed's formula α·cache_level − β·kv_hit_rate + γ·queue_wait + δ·size/bandwidth;
// `round-robin` and `least-loaded` exist for comparison.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "cluster/agent_state.h"
#include "gateway/ttft_fit.h"

namespace uma::gateway {

enum class Policy : std::uint8_t { kPredicted, kSeed, kRoundRobin, kLeastLoaded };
bool parse_policy(std::string_view name, Policy* out);  // predicted | seed | round-robin | least-loaded

struct Candidate {
  const cluster::AgentState* agent = nullptr;
  std::int64_t cached_tokens = 0;       // the prompt's leading tokens it holds in KV
  std::int64_t pending_tokens = 0;      // prompt tokens this gateway sent it that its state does not show yet
  double load_bandwidth_bytes_s = 0.0;  // of the tier holding the model, when not loaded (0: the default)
  std::int64_t loader_queue_bytes = 0;  // weights its loader reads before this model's
  const TtftFit* fit = nullptr;         // its measured TTFTs (the gateway's), if any
  std::int64_t running = 0;             // requests it serves or holds now (its report plus this gateway's unreported)
};

struct RouteRequest {
  std::string_view model;  // empty: any agent's (one model per agent)
  std::int64_t prompt_tokens = 0;
};

struct RoutingParams {
  double default_prefill_tok_s = 500.0;  // an agent that has not measured yet, when none of its peers has
  double default_load_bytes_s = 1e9;     // a tier whose bandwidth is not known
  double alpha = 1.0, beta = 1.0, gamma = 1.0, delta = 1.0;  // the seed policy's weights
  std::size_t min_fit_samples = 8;  // measured answers before an agent's fit replaces its beat's model
};

struct Prediction {  // seconds
  double load = 0.0, queue = 0.0, prefill = 0.0;
  std::int64_t uncached = 0, ahead = 0;  // the tokens it was predicted from (what a fit learns on)
  std::int64_t running = 0, cluster_running = 0;  // requests in flight on it / on every candidate
  std::int64_t cluster_ahead = 0;                 // prompt tokens ahead on every candidate (for the debug log)
  bool fitted = false;                   // from the agent's measured fit, not its beat's model
  double total() const { return load + queue + prefill; }
};

Prediction predict_ttft(const Candidate& c, const RouteRequest& r, const RoutingParams& p);

// The median measured prefill rate among the candidates serving the request's model; 0: none has
// measured. choose() predicts an unmeasured agent at this rate (RoutingParams' default otherwise).
double cluster_prefill_tok_s(std::span<const Candidate> candidates, const RouteRequest& r);

struct RouteChoice {
  int index = -1;  // into the candidates; -1: none serves the model
  Prediction predicted;
};
// `rr_cursor`: round-robin's position, kept by the caller between requests.
RouteChoice choose(Policy policy, std::span<const Candidate> candidates, const RouteRequest& r, const RoutingParams& p,
                   std::uint64_t* rr_cursor);

}  // namespace uma::gateway
