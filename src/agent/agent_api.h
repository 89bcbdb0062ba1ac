// AgentApi: uma-agent's management endpoints (docs/AGENT.md), on httpkit/request_server.h, which
// refuses every path but /health without the cluster's key when one is set:
//   POST /load     {"model": ID, "keep_alive": 300 | "5m" | -1, "stream": true}
//                  progress as SSE (`data: {"model","state","tier","bytes","ready_bytes","seconds"}`)
//                  ending with {"state":"loaded","http":URL,...} or {"error":{...}}; with
//                  "stream": false one JSON answer at the end
//   POST /unload   {"model": ID, "force": false} -> {"model","state":"unloaded"|"draining"}
//   POST /prefetch {"model": ID, "tier": "nvme" | "dram"} -> 202 {"model","tier"} (the store's
//                  loader moves it; GET /models shows it arrive)
//   GET  /models   every model the catalog has and this agent's view of it: state (remote |
//                  nvme | dram | queued | filling | starting | loaded | unloading), tier, bytes,
//                  ready_bytes, loaded_at, last_used (ms since the epoch), keep_alive (ms), in_use,
//                  http, pid
//   GET  /health, GET /metrics (Prometheus text)
// keep_alive is Ollama's: a number of seconds or a duration ("300ms", "5m", "1h30m"); negative:
// never unloaded for idleness; 0: unloaded as soon as it is idle.
//
// Threading: the I/O thread (the host's and the server's). JSON lives here, at the edge.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agent/model_host.h"
#include "httpkit/request_server.h"

namespace uma::agent {

// A duration as Ollama's keep_alive takes it: "-1", "0", "45s", "300ms", "5m", "1h30m" (a bare
// number is seconds). Negative: -1 (forever).
Status parse_duration_ms(std::string_view text, std::int64_t* ms);
// A body's `keep_alive` (absent or null: nullopt), a 400 naming it when malformed.
Status read_keep_alive(const nlohmann::json& body, std::optional<std::int64_t>* out);
// The host's counters and budget as Prometheus text (uma_agent_*).
std::string host_metrics_text(const ModelHost& host);
// Each model in `store` at its fastest tier (uma_agent_model_tier).
std::string store_metrics_text(const store::TierStore& store);

class AgentApi {
 public:
  struct CatalogEntry {
    std::string id;
    std::uint64_t bytes = 0;
  };
  using ListCatalog = std::function<Status(std::vector<CatalogEntry>*)>;
  AgentApi(ModelHost& host, store::TierStore& store, ModelHost::Lookup lookup, ListCatalog list)
      : host_(host), store_(store), lookup_(std::move(lookup)), list_(std::move(list)) {}
  void handle(const HttpExchangePtr& ex);

 private:
  void load(const HttpExchangePtr& ex);
  void unload(const HttpExchangePtr& ex);
  void prefetch(const HttpExchangePtr& ex);
  void models(const HttpExchangePtr& ex);
  void metrics(const HttpExchangePtr& ex);

  ModelHost& host_;
  store::TierStore& store_;
  ModelHost::Lookup lookup_;
  ListCatalog list_;
};

}  // namespace uma::agent
