#include "metrics/server_metrics.h"

#include <nlohmann/json.hpp>

namespace uma {

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
  j["decode_ms_last"] = decode_ms_last.load();
  j["decode_ms_ewma"] = decode_ms_ewma.load();
  j["ttft_ms_last"] = ttft_ms_last.load();
  j["active_sessions"] = active_sessions.load();
  j["queued_sessions"] = queued_sessions.load();
  j["kv_tokens_used"] = kv_tokens_used.load();
  j["kv_sequences_used"] = kv_sequences_used.load();
  j["kv_cells_total"] = kv_cells_total.load();
  j["kv_cells_reserved"] = kv_cells_reserved.load();
  j["requests_total"] = requests_total.load();
  j["requests_completed_total"] = requests_completed_total.load();
  j["requests_cancelled_total"] = requests_cancelled_total.load();
  j["prefill_skipped_ticks_total"] = prefill_skipped_ticks_total.load();
  j["ttft_slo_miss_total"] = ttft_slo_miss_total.load();
  j["tbt_slo_miss_total"] = tbt_slo_miss_total.load();
  j["connections_open"] = connections_open.load();
  j["sessions_open"] = sessions_open.load();
  j["connections_accepted_total"] = connections_accepted_total.load();
  j["connections_rejected_total"] = connections_rejected_total.load();
  j["tx_drops_total"] = tx_drops_total.load();
  j["disconnects_mid_stream_total"] = disconnects_mid_stream_total.load();
  j["idle_timeouts_total"] = idle_timeouts_total.load();
  auto& errors = j["errors_total"] = nlohmann::ordered_json::object();
  for (std::size_t i = 1; i < kErrorKinds; ++i) {
    const auto code = static_cast<ErrorCode>(i);
    errors[std::string(error_code_name(code))] = errors_[i].load();
  }
  auto& list = j["sessions"] = nlohmann::ordered_json::array();
  {
    std::lock_guard<std::mutex> lock(sessions_mu_);
    for (const SessionTiming& s : sessions_) {
      list.push_back({{"id", s.id}, {"state", s.state}, {"prompt_tokens", s.prompt_tokens},
                      {"prefilled", s.prefilled}, {"generated", s.generated}, {"kv_tokens", s.kv_tokens},
                      {"queue_ms", s.queue_ms}, {"ttft_ms", s.ttft_ms}, {"tbt_ms_ewma", s.tbt_ms_ewma},
                      {"tbt_ms_max", s.tbt_ms_max}});
    }
  }
  return j.dump();
}

}  // namespace uma
