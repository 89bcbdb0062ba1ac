#include "tools/bench/stats.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace uma::bench {
namespace {

double ms(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double, std::milli>(b - a).count(); }

double nearest_rank(const std::vector<double>& sorted, double p) {
  const auto n = static_cast<double>(sorted.size());
  const auto rank = static_cast<std::size_t>(std::ceil(p / 100.0 * n));
  return sorted[std::clamp<std::size_t>(rank, 1, sorted.size()) - 1];
}

double ttft(const RequestRecord& r) { return ms(r.sent, r.tokens.front()); }
double tpot(const RequestRecord& r) {
  return r.tokens.size() < 2 ? 0.0 : ms(r.tokens.front(), r.tokens.back()) / double(r.tokens.size() - 1);
}

}  // namespace

Summary summarize(std::vector<double> values) {
  Summary s;
  s.n = values.size();
  if (values.empty()) return s;
  std::sort(values.begin(), values.end());
  s.p50 = nearest_rank(values, 50);
  s.p90 = nearest_rank(values, 90);
  s.p95 = nearest_rank(values, 95);
  s.p99 = nearest_rank(values, 99);
  s.max = values.back();
  s.mean = std::accumulate(values.begin(), values.end(), 0.0) / double(values.size());
  return s;
}

ItlSplit split_itl_by_prefill(const std::vector<RequestRecord>& streams, const std::vector<RequestRecord>& long_prompts) {
  std::vector<std::pair<Clock::time_point, Clock::time_point>> windows;
  for (const RequestRecord& r : long_prompts) windows.emplace_back(r.sent, r.tokens.empty() ? r.done : r.tokens.front());
  std::vector<double> steady, during;
  for (const RequestRecord& r : streams) {
    for (std::size_t k = 1; k < r.tokens.size(); ++k) {
      const Clock::time_point a = r.tokens[k - 1], b = r.tokens[k];
      const bool overlaps = std::any_of(windows.begin(), windows.end(),
                                        [&](const auto& w) { return b > w.first && a < w.second; });
      (overlaps ? during : steady).push_back(ms(a, b));
    }
  }
  return {summarize(std::move(steady)), summarize(std::move(during))};
}

bool meets_slo(const RequestRecord& r, const SloTargets& slo) {
  if (!r.ok || r.tokens.empty()) return false;
  if (slo.ttft_ms > 0 && ttft(r) > slo.ttft_ms) return false;
  if (slo.tpot_ms > 0 && tpot(r) > slo.tpot_ms) return false;
  return true;
}

RunReport build_report(const std::vector<RequestRecord>& records, const SloTargets& slo) {
  RunReport rep;
  rep.requests = records.size();
  std::vector<double> ttfts, tpots, itls, e2es;
  Clock::time_point first = Clock::time_point::max(), last = Clock::time_point::min();
  for (const RequestRecord& r : records) {
    first = std::min(first, r.sent);
    last = std::max(last, r.done);
    if (!r.ok) {
      rep.errors[r.error.empty() ? "unknown" : r.error]++;
      continue;
    }
    rep.ok++;
    rep.output_tokens += r.completion_tokens;
    rep.prompt_tokens += r.prompt_tokens;
    e2es.push_back(ms(r.sent, r.done));
    if (r.tokens.empty()) continue;
    ttfts.push_back(ttft(r));
    if (r.tokens.size() >= 2) tpots.push_back(tpot(r));
    for (std::size_t i = 1; i < r.tokens.size(); ++i) itls.push_back(ms(r.tokens[i - 1], r.tokens[i]));
    if (meets_slo(r, slo)) rep.slo_met++;
  }
  rep.ttft_ms = summarize(std::move(ttfts));
  rep.tpot_ms = summarize(std::move(tpots));
  rep.itl_ms = summarize(std::move(itls));
  rep.e2e_ms = summarize(std::move(e2es));
  rep.duration_s = records.empty() ? 0.0 : std::max(0.0, ms(first, last) / 1000.0);
  if (rep.duration_s > 0) {
    rep.output_tok_s = double(rep.output_tokens) / rep.duration_s;
    rep.requests_s = double(rep.ok) / rep.duration_s;
    rep.goodput_req_s = double(rep.slo_met) / rep.duration_s;
  }
  return rep;
}

}  // namespace uma::bench
