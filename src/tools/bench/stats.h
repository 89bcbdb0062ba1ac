// Latency statistics for uma-bench: percentiles, per-request derived figures, goodput.
// Pure functions over recorded timings, unit-tested (stats_test.cc).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace uma::bench {

using Clock = std::chrono::steady_clock;

// What one request did, as seen by the client.
struct RequestRecord {
  std::string klass = "interactive";  // workload class (interactive | background)
  bool ok = false;
  std::string error;                  // error kind when !ok (e.g. E_BUSY, http_503, connect)
  Clock::time_point sent{};
  std::vector<Clock::time_point> tokens;  // arrival of each streamed chunk carrying text
  std::int32_t prompt_tokens = 0;     // as reported by the server (0 if not reported)
  std::int32_t completion_tokens = 0; // as reported by the server, else streamed chunks
  Clock::time_point done{};
  int index = -1;  // the request's number in a closed-loop run (its turn in the groups workload)
};

struct Summary {
  double p50 = 0, p90 = 0, p95 = 0, p99 = 0, max = 0, mean = 0;
  std::size_t n = 0;
};

// Nearest-rank percentiles (p in [0,100]) of the values; all zeros when empty.
Summary summarize(std::vector<double> values);

struct SloTargets {
  double ttft_ms = 0;  // 0: not checked
  double tpot_ms = 0;  // 0: not checked
};

struct RunReport {
  std::size_t requests = 0, ok = 0;
  std::map<std::string, std::size_t> errors;  // by kind
  Summary ttft_ms, tpot_ms, itl_ms, e2e_ms;
  double duration_s = 0;
  double output_tok_s = 0, requests_s = 0;
  std::size_t slo_met = 0;       // ok requests meeting every SLO target
  double goodput_req_s = 0;      // slo_met / duration
  std::int64_t output_tokens = 0, prompt_tokens = 0;
};

// TTFT: sent -> first token. TPOT: (last token - first token) / (tokens - 1), per request.
// ITL: every gap between consecutive tokens of a request. Duration: first sent -> last done.
RunReport build_report(const std::vector<RequestRecord>& records, const SloTargets& slo);

// Mixed workloads: every inter-token gap of `streams`, split by whether it overlaps the prefill
// of a long prompt (from its send to its first token, or to its end when none came). "Steady"
// gaps overlap none: the streams' cadence with nothing arriving.
struct ItlSplit {
  Summary steady_ms, during_prefill_ms;
};
ItlSplit split_itl_by_prefill(const std::vector<RequestRecord>& streams, const std::vector<RequestRecord>& long_prompts);

// Does one successful request meet the targets?
bool meets_slo(const RequestRecord& r, const SloTargets& slo);

}  // namespace uma::bench
