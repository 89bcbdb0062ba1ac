#include "tools/soak/report.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>

namespace uma::soak {
namespace {

// Daemon-side errors this workload never provokes: any of them is a failure.
constexpr const char* kNeverExpected[] = {"overloaded", "too_many_sessions", "decode_failed", "kv_exhausted",
                                          "internal", "shutting_down", "model_load"};

std::int64_t error_delta(const RunData& d, const std::string& kind) {
  const auto end = d.metrics_end.errors.find(kind);
  const auto base = d.metrics_baseline.errors.find(kind);
  return (end == d.metrics_end.errors.end() ? 0 : end->second) - (base == d.metrics_baseline.errors.end() ? 0 : base->second);
}

std::string mib(std::int64_t kb) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f MiB", static_cast<double>(kb) / 1024.0);
  return b;
}

}  // namespace

Verdict evaluate(const RunData& d, const Tally& t) {
  Verdict v;
  v.rss_baseline_kb = d.proc_baseline.rss_kb;
  v.fd_baseline = d.proc_baseline.fds;
  v.rss_end_kb = d.proc_end.rss_kb;
  v.fd_end = d.proc_end.fds;
  v.fd_max = v.fd_baseline;
  v.rss_max_kb = v.rss_baseline_kb;
  // RSS at the end of warm-up: the first sample at or after it. The last 10%: samples from 90% of
  // the run to the moment the clients stopped (at least the last sample before that moment).
  const Sample* last_in_run = nullptr;
  for (const Sample& s : d.samples) {
    if (!s.proc.alive) continue;
    if (s.proc.rss_kb > v.rss_max_kb) {
      v.rss_max_kb = s.proc.rss_kb;
      v.rss_max_at_s = s.t_s;
    }
    v.fd_max = std::max(v.fd_max, s.proc.fds);
    // Like against like: the peak over a window of 10% of the run right after the warm-up, against
    // the peak over the last 10%. A single sample would not do: RSS dips by ~14 MiB whenever glibc
    // hands freed pages back (seen in the 30-minute run), and a dip taken as the reference reads
    // as growth.
    if (s.t_s >= d.warmup_s && s.t_s <= d.warmup_s + 0.1 * d.run_s) v.rss_warm_kb = std::max(v.rss_warm_kb, s.proc.rss_kb);
    if (s.t_s <= d.run_s) {
      last_in_run = &s;
      if (s.t_s >= 0.9 * d.run_s) v.rss_last10_max_kb = std::max(v.rss_last10_max_kb, s.proc.rss_kb);
    }
  }
  if (v.rss_last10_max_kb == 0 && last_in_run != nullptr) v.rss_last10_max_kb = last_in_run->proc.rss_kb;
  if (v.rss_warm_kb > 0) {
    v.rss_growth_pct = 100.0 * static_cast<double>(v.rss_last10_max_kb - v.rss_warm_kb) / static_cast<double>(v.rss_warm_kb);
  }
  const double run = std::max(d.run_s, 1e-9);
  v.client_tok_s = static_cast<double>(t.tokens()) / run;
  v.daemon_tok_s = static_cast<double>(d.metrics_end.tokens_generated_total - d.metrics_baseline.tokens_generated_total) / run;
  for (Front f : {Front::kUds, Front::kHttp}) v.drops_seen += t.count(f, Action::kSlow, Outcome::kDropped);
  v.drops_server = d.metrics_end.tx_drops_total - d.metrics_baseline.tx_drops_total;

  std::int64_t exact = 0;
  for (Front f : {Front::kUds, Front::kHttp}) {
    for (Action a : {Action::kStream, Action::kFull, Action::kSlow}) exact += t.count(f, a, Outcome::kExact);
  }
  const MetricsSample& m = d.metrics_end;
  std::string never;
  for (const char* kind : kNeverExpected) {
    if (const std::int64_t n = error_delta(d, kind); n != 0) never += std::string(never.empty() ? "" : ", ") + kind + " " + std::to_string(n);
  }
  const std::int64_t unexpected = t.total(Outcome::kUnexpected);
  v.checks = {
      {"daemon_alive", !d.daemon_gone, d.daemon_gone ? "umad exited during the soak" : "umad ran throughout"},
      {"no_unexpected_errors", unexpected == 0, std::to_string(unexpected) + " unexpected"},
      {"every_stream_exact", t.mismatches() == 0 && exact > 0,
       std::to_string(exact) + " whole replies exact, " + std::to_string(t.mismatches()) + " differed"},
      {"kv_back_to_zero",
       m.ok && m.kv_tokens_used == 0 && m.kv_sequences_used == 0 && m.kv_cells_granted == 0 && m.active_sessions == 0 &&
           m.queued_sessions == 0,
       m.ok ? "kv_tokens_used " + std::to_string(m.kv_tokens_used) + ", kv_sequences_used " +
                  std::to_string(m.kv_sequences_used) + ", kv_cells_granted " + std::to_string(m.kv_cells_granted) +
                  ", active " + std::to_string(m.active_sessions) + ", queued " + std::to_string(m.queued_sessions) +
                  " (prefix cache keeps " + std::to_string(m.prefix_kept_sequences) + " sequences, ~" +
                  std::to_string(m.prefix_kept_cells) + " cells, on purpose)"
            : "no metrics at the end: " + m.error},
      {"rss_growth", v.rss_warm_kb > 0 && v.rss_growth_pct <= d.rss_growth_max_pct,
       "peak after warm-up " + mib(v.rss_warm_kb) + ", max in the last 10% " + mib(v.rss_last10_max_kb) + ": " +
           std::to_string(v.rss_growth_pct) + "% (limit " + std::to_string(d.rss_growth_max_pct) + "%)"},
      {"fds_back_to_baseline", d.proc_end.alive && v.fd_end == v.fd_baseline,
       "baseline " + std::to_string(v.fd_baseline) + ", end " + std::to_string(v.fd_end)},
      {"drops_accounted", v.drops_seen <= v.drops_server,
       std::to_string(v.drops_seen) + " slow readers cut, server tx_drops_total +" + std::to_string(v.drops_server)},
      {"daemon_errors_expected_only", m.ok && never.empty(),
       !m.ok ? "no metrics at the end" : never.empty() ? "none of the unprovoked kinds" : never},
  };
  v.pass = std::all_of(v.checks.begin(), v.checks.end(), [](const Check& c) { return c.pass; });
  return v;
}

void print_summary(const RunData& d, const Tally& t, const Verdict& v) {
  std::printf("\n== uma-soak: %d clients, %.0f s (planned %.0f s), warm-up %.0f s, seed %llu\n", d.clients, d.run_s,
              d.planned_s, d.warmup_s, static_cast<unsigned long long>(d.seed));
  std::printf("%-6s %-12s", "front", "action");
  for (std::size_t o = 0; o < kOutcomes; ++o) std::printf(" %12s", std::string(name(static_cast<Outcome>(o))).c_str());
  std::printf("\n");
  for (Front f : {Front::kUds, Front::kHttp}) {
    for (std::size_t a = 0; a < kActions; ++a) {
      std::printf("%-6s %-12s", std::string(name(f)).c_str(), std::string(name(static_cast<Action>(a))).c_str());
      for (std::size_t o = 0; o < kOutcomes; ++o) {
        std::printf(" %12lld", static_cast<long long>(t.count(f, static_cast<Action>(a), static_cast<Outcome>(o))));
      }
      std::printf("\n");
    }
  }
  std::printf("requests %lld, tokens received %lld: %.1f tok/s (daemon generated %.1f tok/s)\n",
              static_cast<long long>(t.total_requests()), static_cast<long long>(t.tokens()), v.client_tok_s, v.daemon_tok_s);
  std::printf("RSS: baseline %s, peak after warm-up %s, max %s (first at %.0f s; last 10%%: %s), end %s; growth %.2f%%\n",
              mib(v.rss_baseline_kb).c_str(), mib(v.rss_warm_kb).c_str(), mib(v.rss_max_kb).c_str(), v.rss_max_at_s,
              mib(v.rss_last10_max_kb).c_str(), mib(v.rss_end_kb).c_str(), v.rss_growth_pct);
  std::printf("fds: baseline %lld, max %lld, end %lld; settled in %.1f s%s\n", static_cast<long long>(v.fd_baseline),
              static_cast<long long>(v.fd_max), static_cast<long long>(v.fd_end), d.settle_s, d.settled ? "" : " (NOT settled)");
  const MetricsSample& m = d.metrics_end;
  std::printf("KV at end: tokens_used %lld, sequences_used %lld, cells_granted %lld of %lld; prefix cache keeps %lld "
              "sequences (~%lld cells) + %lld host snapshots (%s)\n",
              static_cast<long long>(m.kv_tokens_used), static_cast<long long>(m.kv_sequences_used),
              static_cast<long long>(m.kv_cells_granted), static_cast<long long>(m.kv_cells_total),
              static_cast<long long>(m.prefix_kept_sequences), static_cast<long long>(m.prefix_kept_cells),
              static_cast<long long>(m.prefix_host_snapshots), mib(m.prefix_host_bytes / 1024).c_str());
  std::printf("daemon errors_total during the run:");
  for (const auto& [kind, n] : m.errors) {
    if (const std::int64_t dn = error_delta(d, kind); dn != 0) std::printf(" %s +%lld", kind.c_str(), static_cast<long long>(dn));
  }
  std::printf("; tx_drops +%lld, disconnects_mid_stream +%lld, cancelled +%lld\n", static_cast<long long>(v.drops_server),
              static_cast<long long>(m.disconnects_mid_stream_total - d.metrics_baseline.disconnects_mid_stream_total),
              static_cast<long long>(m.requests_cancelled_total - d.metrics_baseline.requests_cancelled_total));
  const std::vector<std::string> first = t.first_unexpected();
  if (!first.empty()) {
    std::printf("first unexpected errors (%zu of %lld):\n", first.size(), static_cast<long long>(t.total(Outcome::kUnexpected)));
    for (const std::string& e : first) std::printf("  %s\n", e.c_str());
  }
  for (const Check& c : v.checks) std::printf("%s  %-28s %s\n", c.pass ? "PASS" : "FAIL", c.name.c_str(), c.detail.c_str());
  std::printf("%s\n", v.pass ? "SOAK PASSED" : "SOAK FAILED");
  std::fflush(stdout);
}

std::string json_line(const RunData& d, const Tally& t, const Verdict& v) {
  nlohmann::ordered_json j;
  j["soak"] = v.pass ? "pass" : "fail";
  j["clients"] = d.clients;
  j["seed"] = d.seed;
  j["run_s"] = d.run_s;
  j["warmup_s"] = d.warmup_s;
  j["requests"] = t.total_requests();
  auto& by = j["by_action"] = nlohmann::ordered_json::object();
  for (Front f : {Front::kUds, Front::kHttp}) {
    for (std::size_t a = 0; a < kActions; ++a) {
      auto& o = by[std::string(name(f)) + "." + std::string(name(static_cast<Action>(a)))] = nlohmann::ordered_json::object();
      for (std::size_t k = 0; k < kOutcomes; ++k) {
        if (const std::int64_t n = t.count(f, static_cast<Action>(a), static_cast<Outcome>(k)); n > 0) {
          o[std::string(name(static_cast<Outcome>(k)))] = n;
        }
      }
    }
  }
  j["unexpected"] = t.total(Outcome::kUnexpected);
  j["mismatches"] = t.mismatches();
  j["tokens"] = t.tokens();
  j["client_tok_s"] = v.client_tok_s;
  j["daemon_tok_s"] = v.daemon_tok_s;
  j["rss_kb"] = {{"baseline", v.rss_baseline_kb}, {"after_warmup", v.rss_warm_kb}, {"max", v.rss_max_kb},
                 {"last10_max", v.rss_last10_max_kb}, {"end", v.rss_end_kb}, {"growth_pct", v.rss_growth_pct},
                 {"max_at_s", v.rss_max_at_s}};
  j["fds"] = {{"baseline", v.fd_baseline}, {"max", v.fd_max}, {"end", v.fd_end}};
  const MetricsSample& m = d.metrics_end;
  j["kv_end"] = {{"tokens_used", m.kv_tokens_used}, {"sequences_used", m.kv_sequences_used},
                 {"cells_granted", m.kv_cells_granted}, {"active", m.active_sessions}, {"queued", m.queued_sessions},
                 {"prefix_kept_sequences", m.prefix_kept_sequences}, {"prefix_kept_cells", m.prefix_kept_cells}};
  j["tx_drops"] = {{"seen_by_clients", v.drops_seen}, {"server", v.drops_server}};
  j["settle_s"] = d.settle_s;
  auto& checks = j["checks"] = nlohmann::ordered_json::object();
  for (const Check& c : v.checks) checks[c.name] = c.pass;
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace uma::soak
