// GatewayServer's /metrics page (Prometheus text): its counters, gauges and histograms, written
// from GatewayMetrics and the agent directory. Split from gateway_server.cc: one idea a file.
#include <algorithm>
#include <cmath>
#include <string>

#include "gateway/gateway_server.h"
#include "metrics/prometheus.h"

namespace uma::gateway {

namespace {

// The median of `values`, or of their magnitudes (a copy is partly sorted).
template <typename Values>
double median_of(const Values& values, bool magnitude) {
  std::vector<double> e(values.begin(), values.end());
  if (magnitude) {
    for (double& x : e) x = std::abs(x);
  }
  std::nth_element(e.begin(), e.begin() + static_cast<std::ptrdiff_t>(e.size() / 2), e.end());
  return e[e.size() / 2];
}

}  // namespace

std::string GatewayServer::metrics_text() {
  std::string out;
  write_request_metrics(out);
  write_load_metrics(out);
  write_agent_metrics(out);
  write_latency_metrics(out);
  return out;
}

// What became of the completions: routed, retried, resumed, queued, refused.
void GatewayServer::write_request_metrics(std::string& out) {
  const GatewayMetrics& m = metrics_;
  prom::metric(out, "uma_gw_requests_total", "Completions routed.", static_cast<double>(m.requests_total));
  prom::metric(out, "uma_gw_abandoned_total", "Completions whose client left while their prompt was tokenized.",
               static_cast<double>(m.abandoned_total));
  prom::metric(out, "uma_gw_bad_requests_total", "Requests the gateway answered with a 4xx itself.",
               static_cast<double>(m.bad_requests_total + server_.rejected()));
  prom::metric(out, "uma_gw_retries_total", "Requests sent again before their first byte.", static_cast<double>(m.retries_total));
  prom::metric(out, "uma_gw_resumes_total", "Streams resumed on another agent mid-stream.", static_cast<double>(m.resumes_total));
  prom::metric(out, "uma_gw_failed_total", "Requests ended with an error the gateway wrote.", static_cast<double>(m.failed_total));
  prom::metric(out, "uma_gw_unavailable_total", "Requests no agent could take.", static_cast<double>(m.unavailable_total));
  prom::metric(out, "uma_gw_overloaded_total", "Requests refused (429) because every agent was full and the queue was, or they waited too long.",
               static_cast<double>(m.overloaded_total));
  prom::metric(out, "uma_gw_queued_total", "Requests that waited for room on an agent.", static_cast<double>(m.queued_total));
  prom::metric(out, "uma_gw_queued", "Requests waiting for room now.", static_cast<double>(waiting_.waiting_for_room()), prom::Type::kGauge);
  prom::metric(out, "uma_gw_agent_full_total", "Times an agent answered 429 (the request went elsewhere or waited).",
               static_cast<double>(m.agent_full_total));
  prom::metric(out, "uma_gw_awaited_model_total", "Requests that waited for their model to be loaded somewhere.",
               static_cast<double>(m.awaited_model_total));
  prom::metric(out, "uma_gw_awaiting_model", "Requests waiting for their model now.", static_cast<double>(waiting_.waiting_for_models()), prom::Type::kGauge);
  prom::metric(out, "uma_gw_drain_moved_total", "Requests moved off agents that said they are draining (resumed token-exactly).",
               static_cast<double>(m.drain_moved_total));
  prom::metric(out, "uma_gw_drain_left_total", "Requests left to finish on a draining agent (no other agent serves their model).",
               static_cast<double>(m.drain_left_total));
  prom::metric(out, "uma_gw_draining", "1 while this gateway drains (SIGTERM: no new connections, carrying what it has to its end).",
               server_.draining() ? 1.0 : 0.0, prom::Type::kGauge);
  prom::metric(out, "uma_gw_upstream_dialled_total", "Connections opened to agents for completions.",
               static_cast<double>(upstream_pool_.dialled()));
  prom::metric(out, "uma_gw_upstream_reused_total", "Completions sent on a kept-alive connection to their agent.",
               static_cast<double>(upstream_pool_.reused()));
}

// Loads on demand, migrations, fan-out, and the catalog's vocabularies.
void GatewayServer::write_load_metrics(std::string& out) {
  if (cold_loads_ != nullptr) {
    const ColdLoadCounters& c = cold_loads_->counters();
    prom::metric(out, "uma_gw_model_loads_started_total", "Loads this gateway asked a loader for (it held the model's lock).",
                 static_cast<double>(c.started));
    prom::metric(out, "uma_gw_model_loads_failed_total", "Loads this gateway asked for that failed.", static_cast<double>(c.failed));
    prom::metric(out, "uma_gw_model_load_lock_busy_total", "Times another gateway held a model's load lock.",
                 static_cast<double>(c.lock_busy));
    prom::metric(out, "uma_gw_migrations_total", "Times this gateway moved its streams of models served elsewhere too off a loader, to make room for a load.",
                 static_cast<double>(c.migrations));
    prom::metric(out, "uma_gw_migrated_total", "Requests moved to another agent for such a load (resumed token-exactly).",
                 static_cast<double>(metrics_.migrated_total));
    prom::metric(out, "uma_gw_prefetches_total", "Prefetches of busy models this gateway asked loaders for (fan-out).",
                 static_cast<double>(c.prefetches));
    prom::metric(out, "uma_gw_prefetch_failures_total", "Prefetches refused or unreachable.", static_cast<double>(c.prefetch_failures));
    if (!cold_loads_->prediction_errors().empty()) {
      prom::metric(out, "uma_gw_load_prediction_error_median", "Median |predicted/measured - 1| of the loads this gateway asked for.",
                   median_of(cold_loads_->prediction_errors(), true), prom::Type::kGauge);
    }
  }
  const VocabCache::Stats vs = vocabs_.stats();
  prom::metric(out, "uma_gw_vocab_hits_total", "Requests tokenized with a resident vocabulary.", static_cast<double>(vs.hits));
  prom::metric(out, "uma_gw_vocab_loads_total", "Vocabularies loaded from the catalog.", static_cast<double>(vs.loads));
  prom::metric(out, "uma_gw_vocab_load_failures_total", "Vocabularies that could not be loaded.", static_cast<double>(vs.load_failures));
  prom::metric(out, "uma_gw_vocab_evictions_total", "Vocabularies dropped for room (least recently used).", static_cast<double>(vs.evictions));
  prom::metric(out, "uma_gw_vocab_load_seconds_total", "Time spent loading vocabularies.", vs.load_seconds);
  prom::metric(out, "uma_gw_vocabularies", "Catalog vocabularies resident (besides --model's).", static_cast<double>(vs.resident), prom::Type::kGauge);
}

// The cluster as this gateway's view has it: agents, loaders, and each agent's share.
void GatewayServer::write_agent_metrics(std::string& out) {
  prom::metric(out, "uma_gw_agents", "Agents in the cluster view.", static_cast<double>(agents_.size()), prom::Type::kGauge);
  prom::metric(out, "uma_gw_loaders", "Loaders (uma-agents that load models on demand) in the cluster view.",
               static_cast<double>(agents_.loaders().size()), prom::Type::kGauge);
  prom::metric(out, "uma_gw_agents_live", "Agents whose KV-event stream is live (routable).",
               static_cast<double>(agents_.live()), prom::Type::kGauge);
  prom::family(out, "uma_gw_loader_busy_bytes", "Model bytes each loader holds in use, as this gateway's view has it (room it cannot make).",
               prom::Type::kGauge);
  for (const cluster::LoaderState& l : agents_.loaders()) {
    prom::sample(out, "uma_gw_loader_busy_bytes", "loader=\"" + l.id + "\"",
                 static_cast<std::uint64_t>(l.held_bytes - std::min(l.idle_bytes, l.held_bytes)));
  }
  prom::family(out, "uma_gw_agent_blocks", "Prefix blocks each agent holds (its KV-event stream).", prom::Type::kGauge);
  const std::vector<AgentDirectory::AgentSummary> agents = agents_.summary();
  for (const AgentDirectory::AgentSummary& a : agents) {
    prom::sample(out, "uma_gw_agent_blocks", "agent=\"" + a.id + "\",live=\"" + (a.live ? "1" : "0") + "\"",
                 static_cast<std::uint64_t>(a.blocks));
  }
  prom::family(out, "uma_gw_agent_sessions",
               "Requests each agent serves or holds, as this gateway counts them (its load reports and this gateway's dispatches since).",
               prom::Type::kGauge);
  for (const AgentDirectory::AgentSummary& a : agents) {
    prom::sample(out, "uma_gw_agent_sessions", "agent=\"" + a.id + "\"", static_cast<double>(a.sessions));
  }
  // This gateway's own requests on each agent: what a drain of that agent moves or leaves.
  prom::family(out, "uma_gw_agent_proxied", "Requests this gateway carries to each agent now.", prom::Type::kGauge);
  for (const AgentDirectory::AgentSummary& a : agents) {
    prom::sample(out, "uma_gw_agent_proxied", "agent=\"" + a.id + "\"", static_cast<std::uint64_t>(proxies_at(a.id).size()));
  }
}

// Where the time goes: the gateway's own, waits, TTFT and how well it was predicted.
void GatewayServer::write_latency_metrics(std::string& out) {
  const GatewayMetrics& m = metrics_;
  prom::histogram(out, "uma_gw_added_us", "What the gateway adds before the agent starts: request whole to its bytes on the way.", m.added_us.snapshot());
  prom::histogram(out, "uma_gw_route_decision_us", "Routing decision time (candidates, prefix match, choice).", m.route_us.snapshot());
  prom::histogram(out, "uma_gw_queue_wait_ms", "Time a request waited in the gateway for room on an agent.", m.queue_wait_ms.snapshot());
  prom::histogram(out, "uma_gw_model_wait_ms", "Time a request waited for its model to be loaded.", m.model_wait_ms.snapshot());
  prom::histogram(out, "uma_gw_ttft_ms", "Time to first token measured at the gateway (dispatch to first token).", m.ttft_ms.snapshot());
  prom::histogram(out, "uma_gw_ttft_prediction_error", "|predicted - measured| / measured time to first token.", m.ttft_error.snapshot());
  if (!m.ttft_errors.empty()) {
    prom::metric(out, "uma_gw_ttft_prediction_error_median", "Median |predicted/measured - 1| over the last 4096.",
                 median_of(m.ttft_errors, true), prom::Type::kGauge);
    prom::metric(out, "uma_gw_ttft_prediction_bias_median", "Median predicted/measured - 1 over the last 4096.",
                 median_of(m.ttft_errors, false), prom::Type::kGauge);
  }
}

}  // namespace uma::gateway
