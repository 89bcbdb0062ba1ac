#include "metrics/server_metrics.h"

#include <nlohmann/json.hpp>

#include <cstdio>

#include "common/json_text.h"

namespace uma {

std::string_view reject_reason_name(RejectReason r) {
  switch (r) {
    case RejectReason::kQueueFull: return "queue_full";
    case RejectReason::kQueueTimeout: return "queue_timeout";
    case RejectReason::kTenantCap: return "tenant_cap";
    case RejectReason::kSessionCap: return "session_cap";
    case RejectReason::kContext: return "context";
  }
  return "?";
}

namespace {
constexpr std::array<const char*, kGaugeStates> kGaugeStateNames = {"queued", "prefill", "decode", "paused"};
}  // namespace

void ServerMetrics::publish_sessions(std::vector<SessionTiming> sessions) {
  std::lock_guard<std::mutex> lock(sessions_mu_);
  sessions_.swap(sessions);
}

std::string ServerMetrics::to_json() const {
  nlohmann::ordered_json j;
  j["tokens_generated_total"] = tokens_generated_total.load();
  j["prompt_tokens_total"] = prompt_tokens_total.load();
  j["batch_calls_total"] = batch_calls_total.load();
  j["last_batch_size"] = last_batch_size.load();
  j["tick_budget"] = tick_budget.load();
  j["tick_prefill_floor"] = tick_prefill_floor.load();
  j["prefill_fixed_ms"] = prefill_fixed_ms.load();
  j["decode_ms_last"] = decode_ms_last.load();
  j["decode_ms_ewma"] = decode_ms_ewma.load();
  j["ttft_ms_last"] = ttft_ms_last.load();
  j["active_sessions"] = active_sessions.load();
  j["queued_sessions"] = queued_sessions.load();
  j["kv_tokens_used"] = kv_tokens_used.load();
  j["kv_sequences_used"] = kv_sequences_used.load();
  j["kv_cells_total"] = kv_cells_total.load();
  j["kv_cells_granted"] = kv_cells_granted.load();
  j["requests_total"] = requests_total.load();
  j["requests_admitted_total"] = requests_admitted_total.load();
  auto& rejected = j["rejected_total"] = nlohmann::ordered_json::object();
  for (std::size_t i = 0; i < kRejectReasons; ++i) {
    rejected[std::string(reject_reason_name(static_cast<RejectReason>(i)))] = rejected_[i].load();
  }
  auto& states = j["sessions_by_state"] = nlohmann::ordered_json::object();
  for (std::size_t i = 0; i < kGaugeStates; ++i) states[kGaugeStateNames[i]] = sessions_by_state[i].load();
  j["preempted_saved_total"] = preempted_saved_total.load();
  j["preempted_recomputed_total"] = preempted_recomputed_total.load();
  j["preempted_kv_full_total"] = preempted_kv_full_total.load();
  j["preempted_priority_total"] = preempted_priority_total.load();
  j["resumed_total"] = resumed_total.load();
  j["kv_sequence_moves_total"] = kv_sequence_moves_total.load();
  j["kv_restore_fallbacks_total"] = kv_restore_fallbacks_total.load();
  j["kv_exhausted_total"] = kv_exhausted_total.load();
  j["parked_bytes"] = parked_bytes.load();
  const auto looked_up = prefix_lookup_tokens_total.load();
  j["prefix_cache"] = {{"lookups_total", prefix_lookups_total.load()}, {"hits_total", prefix_hits_total.load()},
                       {"lookup_tokens_total", looked_up}, {"reused_tokens_total", prefix_reused_tokens_total.load()},
                       {"hit_ratio_tokens", looked_up ? double(prefix_reused_tokens_total.load()) / double(looked_up) : 0.0},
                       {"evictions_total", prefix_evictions_total.load()}, {"not_kept_total", prefix_not_kept_total.load()},
                       {"kept_sequences", prefix_kept_sequences.load()},
                       {"kept_cells", prefix_kept_cells.load()}, {"host_snapshots", prefix_host_snapshots.load()},
                       {"host_bytes", prefix_host_bytes.load()}};
  j["requests_completed_total"] = requests_completed_total.load();
  j["requests_cancelled_total"] = requests_cancelled_total.load();
  j["prefill_skipped_ticks_total"] = prefill_skipped_ticks_total.load();
  j["ttft_slo_miss_total"] = ttft_slo_miss_total.load();
  j["tbt_slo_miss_total"] = tbt_slo_miss_total.load();
  j["connections_open"] = connections_open.load();
  j["sessions_open"] = sessions_open.load();
  j["connections_accepted_total"] = connections_accepted_total.load();
  j["connections_rejected_total"] = connections_rejected_total.load();
  j["http_connections_open"] = http_connections_open.load();
  j["http_sessions_open"] = http_sessions_open.load();
  j["http_connections_rejected_total"] = http_connections_rejected_total.load();
  j["accept_pauses_total"] = accept_pauses_total.load();
  j["tx_drops_total"] = tx_drops_total.load();
  j["disconnects_mid_stream_total"] = disconnects_mid_stream_total.load();
  j["idle_timeouts_total"] = idle_timeouts_total.load();
  auto summary = [](const Histogram& h) {
    const Histogram::Snapshot s = h.snapshot();
    return nlohmann::ordered_json{{"count", s.count}, {"sum", s.sum}, {"p50", Histogram::quantile(s, 0.5)},
                                  {"p90", Histogram::quantile(s, 0.9)}, {"p99", Histogram::quantile(s, 0.99)}};
  };
  auto& hist = j["histograms"] = nlohmann::ordered_json::object();
  hist["ttft_ms"] = summary(ttft_ms);
  hist["inter_token_ms"] = summary(inter_token_ms);
  hist["queue_ms"] = summary(queue_ms);
  hist["decode_ms"] = summary(decode_ms);
  hist["batch_tokens"] = summary(batch_tokens);
  hist["prefill_chunk"] = summary(prefill_chunk);
  hist["paused_ms"] = summary(paused_ms);
  auto& errors = j["errors_total"] = nlohmann::ordered_json::object();
  for (std::size_t i = 1; i < kErrorKinds; ++i) {
    const auto code = static_cast<ErrorCode>(i);
    errors[std::string(error_code_name(code))] = errors_[i].load();
  }
  auto& list = j["sessions"] = nlohmann::ordered_json::array();
  {
    std::lock_guard<std::mutex> lock(sessions_mu_);
    for (const SessionTiming& s : sessions_) {
      list.push_back({{"id", s.id}, {"state", s.state}, {"priority", s.background ? "background" : "interactive"},
                      {"preemptions", s.preemptions}, {"prompt_tokens", s.prompt_tokens},
                      {"prefilled", s.prefilled}, {"generated", s.generated}, {"kv_tokens", s.kv_tokens},
                      {"queue_ms", s.queue_ms}, {"ttft_ms", s.ttft_ms}, {"tbt_ms_ewma", s.tbt_ms_ewma},
                      {"tbt_ms_max", s.tbt_ms_max}});
    }
  }
  return to_json_text(j);
}

namespace {

void prom_header(std::string& out, const char* name, const char* type, const char* help) {
  out += "# HELP ";
  out += name;
  out += ' ';
  out += help;
  out += "\n# TYPE ";
  out += name;
  out += ' ';
  out += type;
  out += '\n';
}

template <typename T>
void prom_value(std::string& out, const char* name, const char* type, const char* help, T value) {
  prom_header(out, name, type, help);
  out += name;
  out += ' ';
  out += std::to_string(value);
  out += '\n';
}

// One sample of a labelled family: name{key="value"} n
void prom_sample(std::string& out, const char* name, const char* key, std::string_view label, std::uint64_t value) {
  out += name;
  out += '{';
  out += key;
  out += "=\"";
  out += label;
  out += "\"} " + std::to_string(value) + "\n";
}

// `scale` turns the histogram's unit into the exposed one (ms -> s: 0.001).
void prom_histogram(std::string& out, const char* name, const char* help, const Histogram& h, double scale) {
  prom_header(out, name, "histogram", help);
  const Histogram::Snapshot s = h.snapshot();
  char line[256];
  for (std::size_t i = 0; i < s.bounds.size(); ++i) {
    std::snprintf(line, sizeof line, "%s_bucket{le=\"%g\"} %llu\n", name, s.bounds[i] * scale,
                  static_cast<unsigned long long>(s.cumulative[i]));
    out += line;
  }
  std::snprintf(line, sizeof line, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.6f\n%s_count %llu\n", name,
                static_cast<unsigned long long>(s.count), name, s.sum * scale, name,
                static_cast<unsigned long long>(s.count));
  out += line;
}

}  // namespace

std::string ServerMetrics::to_prometheus() const {
  // Names follow vLLM's (vllm:time_to_first_token_seconds, ...) under the uma: prefix.
  std::string out;
  prom_histogram(out, "uma:time_to_first_token_seconds", "Request received to first token.", ttft_ms, 0.001);
  prom_histogram(out, "uma:inter_token_latency_seconds", "Gap between consecutive tokens of a stream.", inter_token_ms, 0.001);
  prom_histogram(out, "uma:request_queue_time_seconds", "Request received to prefill start.", queue_ms, 0.001);
  prom_histogram(out, "uma:decode_duration_seconds", "Duration of one llama_decode (one tick).", decode_ms, 0.001);
  prom_histogram(out, "uma:batch_tokens", "Tokens in one decode.", batch_tokens, 1.0);
  prom_histogram(out, "uma:prefill_chunk_tokens", "Prompt tokens of one prefill chunk.", prefill_chunk, 1.0);
  prom_value(out, "uma:generation_tokens_total", "counter", "Tokens generated.", tokens_generated_total.load());
  prom_value(out, "uma:prompt_tokens_total", "counter", "Prompt tokens admitted.", prompt_tokens_total.load());
  prom_value(out, "uma:decode_calls_total", "counter", "llama_decode calls.", batch_calls_total.load());
  prom_value(out, "uma:requests_total", "counter", "Requests received.", requests_total.load());
  prom_value(out, "uma:request_success_total", "counter", "Requests finished (stop or length).", requests_completed_total.load());
  prom_value(out, "uma:requests_cancelled_total", "counter", "Requests cancelled or abandoned.", requests_cancelled_total.load());
  prom_value(out, "uma:tx_drops_total", "counter", "Connections dropped for reading too slowly.", tx_drops_total.load());
  prom_value(out, "uma:requests_admitted_total", "counter", "Requests admitted by the scheduler.", requests_admitted_total.load());
  prom_header(out, "uma:requests_rejected_total", "counter", "Requests turned away by admission control, by reason.");
  for (std::size_t i = 0; i < kRejectReasons; ++i) {
    prom_sample(out, "uma:requests_rejected_total", "reason", reject_reason_name(static_cast<RejectReason>(i)), rejected_[i].load());
  }
  prom_header(out, "uma:preemptions_total", "counter", "Sessions paused for other work, by what happened to their KV.");
  prom_sample(out, "uma:preemptions_total", "kv", "saved", preempted_saved_total.load());
  prom_sample(out, "uma:preemptions_total", "kv", "dropped", preempted_recomputed_total.load());
  prom_header(out, "uma:preemptions_by_cause_total", "counter", "Sessions paused, by why.");
  prom_sample(out, "uma:preemptions_by_cause_total", "cause", "kv_full", preempted_kv_full_total.load());
  prom_sample(out, "uma:preemptions_by_cause_total", "cause", "priority", preempted_priority_total.load());
  prom_histogram(out, "uma:pause_duration_seconds", "Time one paused session waited to resume (or to end).", paused_ms, 0.001);
  prom_value(out, "uma:resumptions_total", "counter", "Paused sessions resumed.", resumed_total.load());
  prom_value(out, "uma:kv_sequence_moves_total", "counter",
             "Per-sequence KV: running sequences moved to a lower id so a decode is one pass.", kv_sequence_moves_total.load());
  prom_value(out, "uma:kv_exhausted_total", "counter", "Decodes that found no KV cells (recovered by pausing).", kv_exhausted_total.load());
  prom_value(out, "uma:num_requests_running", "gauge", "Requests prefilling or decoding.", active_sessions.load());
  prom_header(out, "uma:num_requests", "gauge", "Requests by scheduler state.");
  for (std::size_t i = 0; i < kGaugeStates; ++i) {
    prom_sample(out, "uma:num_requests", "state", kGaugeStateNames[i], static_cast<std::uint64_t>(sessions_by_state[i].load()));
  }
  prom_value(out, "uma:prefix_cache_queries_total", "counter", "Prefix cache lookups.", prefix_lookups_total.load());
  prom_value(out, "uma:prefix_cache_hits_total", "counter", "Prefix cache lookups that reused KV.", prefix_hits_total.load());
  prom_value(out, "uma:prefix_cache_query_tokens_total", "counter", "Prompt tokens looked up in the prefix cache.", prefix_lookup_tokens_total.load());
  prom_value(out, "uma:prefix_cache_hit_tokens_total", "counter", "Prompt tokens served from cached KV.", prefix_reused_tokens_total.load());
  prom_value(out, "uma:prefix_cache_evictions_total", "counter", "Kept sequences evicted from the KV cache.", prefix_evictions_total.load());
  prom_value(out, "uma:prefix_cache_not_kept_total", "counter", "Finished sequences not kept: first block not seen before and short.", prefix_not_kept_total.load());
  prom_value(out, "uma:prefix_cache_kept_sequences", "gauge", "Finished sequences kept in the KV cache.", prefix_kept_sequences.load());
  prom_value(out, "uma:prefix_cache_kept_cells", "gauge", "KV cells held by kept sequences (estimate).", prefix_kept_cells.load());
  prom_value(out, "uma:prefix_cache_host_bytes", "gauge", "Host memory held by prefix snapshots.", prefix_host_bytes.load());
  prom_value(out, "uma:parked_kv_bytes", "gauge", "Host memory held by the KV of paused sessions.", parked_bytes.load());
  prom_value(out, "uma:num_requests_waiting", "gauge", "Requests waiting for KV room.", queued_sessions.load());
  prom_value(out, "uma:kv_cache_tokens_used", "gauge", "Tokens held in the KV cache.", kv_tokens_used.load());
  prom_value(out, "uma:kv_cache_cells_total", "gauge", "KV cells (n_ctx).", kv_cells_total.load());
  prom_value(out, "uma:kv_cache_cells_granted", "gauge", "KV cells granted to running requests (their tokens so far).", kv_cells_granted.load());
  prom_value(out, "uma:connections_open", "gauge", "Open client connections (Unix socket).", connections_open.load());
  prom_value(out, "uma:http_connections_open", "gauge", "Open HTTP connections.", http_connections_open.load());
  prom_value(out, "uma:connections_rejected_total", "counter", "Connections closed at once: over --max-connections (Unix socket).",
             connections_rejected_total.load());
  prom_value(out, "uma:http_connections_rejected_total", "counter", "HTTP connections closed at once: over --max-connections.",
             http_connections_rejected_total.load());
  prom_value(out, "uma:accept_pauses_total", "counter", "Times accepting paused (out of descriptors or memory) and backed off.",
             accept_pauses_total.load());
  prom_header(out, "uma:errors_total", "counter", "Errors by kind.");
  for (std::size_t i = 1; i < kErrorKinds; ++i) {
    prom_sample(out, "uma:errors_total", "kind", error_code_name(static_cast<ErrorCode>(i)), errors_[i].load());
  }
  return out;
}

}  // namespace uma
