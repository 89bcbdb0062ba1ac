// The soak's verdict: figures from the tally and the daemon samples, its assertions
// (0 unexpected errors, every stream exact, KV back to 0, RSS growth within a bound after warm-up,
// descriptors back to baseline), a human summary and one machine-readable JSON line.
//
// Thread-safety: plain functions over values, called once the clients and the monitor stopped.
// Ownership: RunData holds copies; nothing is retained.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tools/soak/monitor.h"
#include "tools/soak/soak.h"

namespace uma::soak {

struct RunData {
  int clients = 0;
  std::uint64_t seed = 0;
  double planned_s = 0;       // --duration
  double run_s = 0;           // clients started -> all stopped (monitor clock)
  double warmup_s = 0;
  double rss_growth_max_pct = 2.0;
  ProcSample proc_baseline;   // before the first client connected
  MetricsSample metrics_baseline;
  std::vector<Sample> samples;
  bool settled = false;       // gauges and descriptors back within the settle deadline
  double settle_s = 0;        // how long that took (or the deadline)
  ProcSample proc_end;
  MetricsSample metrics_end;
  bool daemon_gone = false;
};

struct Check {
  std::string name;
  bool pass = false;
  std::string detail;
};

struct Verdict {
  std::vector<Check> checks;
  bool pass = false;
  // Figures.
  std::int64_t rss_baseline_kb = 0, rss_warm_kb = 0, rss_max_kb = 0, rss_last10_max_kb = 0, rss_end_kb = 0;
  double rss_growth_pct = 0;
  double rss_max_at_s = 0;  // when RSS first reached its max (a warm-up long enough ends before)
  std::int64_t fd_baseline = 0, fd_max = 0, fd_end = 0;
  double client_tok_s = 0, daemon_tok_s = 0;
  std::int64_t drops_seen = 0, drops_server = 0;
};

Verdict evaluate(const RunData& d, const Tally& t);
void print_summary(const RunData& d, const Tally& t, const Verdict& v);  // stdout
std::string json_line(const RunData& d, const Tally& t, const Verdict& v);

}  // namespace uma::soak
