// uma-soak: the soak driver. N clients (half over the Unix socket, half over the OpenAI
// HTTP API) run for a duration, each iteration a random (seeded) action: exact completions,
// cancels, disconnects mid-stream, slow readers, malformed requests, probes. A monitor samples
// the daemon's RSS, descriptors and gauges. At the end it waits for the daemon to settle and
// asserts: 0 unexpected errors, every stream exact, KV back to 0, RSS growth after warm-up within
// the limit, descriptors back to baseline. Exit 0 when all hold, 1 otherwise, 2 on bad usage.
// Run by bench/soak.sh; see docs/BENCHMARKS.md, "Soak".
#include <CLI/CLI.hpp>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <thread>

#include "tools/soak/actions.h"
#include "tools/soak/conn.h"
#include "tools/soak/monitor.h"
#include "tools/soak/report.h"
#include "tools/soak/soak.h"

namespace uma::soak {
namespace {

// "90", "90s", "30m", "1h" -> seconds; negative when unparseable.
double parse_duration(const std::string& s) {
  if (s.empty()) return -1;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  const std::string unit(end);
  if (end == s.c_str() || !std::isfinite(v) || v < 0) return -1;
  if (unit.empty() || unit == "s") return v;
  if (unit == "m") return v * 60;
  if (unit == "h") return v * 3600;
  return -1;
}

bool http_healthy(const Settings& st) {
  std::string err;
  Socket s = Socket::tcp(st.http_host, st.http_port, 0, &err);
  if (!s.valid()) return false;
  const Clock::time_point deadline = Clock::now() + std::chrono::seconds(5);
  if (!s.send_all("GET /health HTTP/1.1\r\nHost: soak\r\nConnection: close\r\n\r\n", deadline, &err)) return false;
  HttpReader rd(s);
  std::string body;
  if (rd.header(deadline, &err) != Read::kData || rd.status() != 200 || rd.body(&body, deadline, &err) != Read::kData) return false;
  return s.wait_eof(deadline, &err) == Read::kEof;  // the daemon's side of it is closed too
}

// Polls `ready` every 100 ms until it holds or `seconds` pass.
template <typename F>
bool poll_until(double seconds, F ready) {
  const Clock::time_point deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  while (true) {
    if (ready()) return true;
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // a polling period, with a deadline
  }
}

void write_csv(const std::string& path, const std::vector<Sample>& samples) {
  std::ofstream f(path);
  f << "t_s,alive,rss_kb,fds,kv_tokens_used,kv_sequences_used,kv_cells_granted,active,queued,connections_open,"
       "sessions_open,tokens_generated_total,tx_drops_total,prefix_kept_sequences,prefix_kept_cells,prefix_host_bytes\n";
  for (const Sample& s : samples) {
    const MetricsSample& m = s.metrics;
    f << s.t_s << ',' << s.proc.alive << ',' << s.proc.rss_kb << ',' << s.proc.fds << ',' << m.kv_tokens_used << ','
      << m.kv_sequences_used << ',' << m.kv_cells_granted << ',' << m.active_sessions << ',' << m.queued_sessions << ','
      << m.connections_open << ',' << m.sessions_open << ',' << m.tokens_generated_total << ',' << m.tx_drops_total << ','
      << m.prefix_kept_sequences << ',' << m.prefix_kept_cells << ',' << m.prefix_host_bytes << '\n';
  }
}

int run(int argc, char** argv) {
  CLI::App app{"uma-soak: a long mixed workload against umad over both front ends, with exact checks and leak checks"};
  Settings st;
  int pid = 0, clients = 32, max_prompt_bytes = 65536, max_frame_bytes = 1 << 20, http_max_body_kib = 1024;
  std::string model, http, duration_s = "30m", warmup_s, samples_csv, json_out;
  double sample_every = 5, timeout = 120, settle = 60, rss_max_pct = 2.0;
  std::uint64_t seed = 1;
  bool no_chat = false;
  app.add_option("--socket", st.socket_path, "umad's Unix socket (framed JSON)")->required();
  app.add_option("--http", http, "umad's HTTP front end, HOST:PORT (without it every client uses the socket)");
  app.add_option("--pid", pid, "umad's process id (RSS and descriptors from /proc)")->required()->check(CLI::PositiveNumber);
  app.add_option("--model", model, "the oracle model umad serves (its vocabulary gives the expected texts)")
      ->required()->check(CLI::ExistingFile);
  app.add_option("-c,--clients", clients, "client threads, alternately UDS and HTTP")->capture_default_str()->check(CLI::Range(1, 1024));
  app.add_option("-d,--duration", duration_s, "how long: seconds, or with a unit: 90s, 30m, 1h")->capture_default_str();
  app.add_option("--warmup", warmup_s, "warm-up excluded from the RSS growth (default: 2 min, at most half the run)");
  app.add_option("--sample-every", sample_every, "seconds between daemon samples")->capture_default_str()->check(CLI::Range(0.1, 600.0));
  app.add_option("--seed", seed, "random seed (actions, prompts, sizes)")->capture_default_str();
  app.add_option("--timeout", timeout, "seconds a read may wait before it is an unexpected stall")->capture_default_str()
      ->check(CLI::Range(1.0, 3600.0));
  app.add_option("--settle", settle, "seconds to wait at the end for KV, sessions and descriptors to go back")
      ->capture_default_str()->check(CLI::Range(1.0, 3600.0));
  app.add_option("--rss-growth-max", rss_max_pct, "most RSS growth after warm-up, percent")->capture_default_str();
  app.add_option("--n-ctx", st.n_ctx, "umad's --n-ctx")->capture_default_str()->check(CLI::Range(16, 1 << 20));
  app.add_option("--max-tokens", st.max_tokens_cap, "umad's --max-tokens")->capture_default_str()->check(CLI::Range(8, 1 << 20));
  app.add_option("--max-prompt-bytes", max_prompt_bytes, "umad's --max-prompt-bytes")->capture_default_str()->check(CLI::Range(1, 64 << 20));
  app.add_option("--max-frame-bytes", max_frame_bytes, "umad's --max-frame-bytes")->capture_default_str()->check(CLI::Range(64, 256 << 20));
  app.add_option("--http-max-body-kib", http_max_body_kib, "umad's --http-max-body-kib")->capture_default_str()->check(CLI::Range(1, 1 << 20));
  app.add_flag("--no-chat", no_chat, "umad has no chat template: no /v1/chat/completions requests");
  app.add_option("--samples-csv", samples_csv, "write every daemon sample here");
  app.add_option("--json-out", json_out, "also write the JSON result line here");
  CLI11_PARSE(app, argc, argv);

  const double run_s = parse_duration(duration_s);
  if (run_s <= 0) {
    std::cerr << "uma-soak: bad --duration '" << duration_s << "'\n";
    return 2;
  }
  const double warm_s = warmup_s.empty() ? std::min(120.0, run_s / 2) : parse_duration(warmup_s);
  if (warm_s < 0 || warm_s >= run_s) {
    std::cerr << "uma-soak: --warmup must be shorter than the run\n";
    return 2;
  }
  if (!http.empty()) {
    const auto colon = http.rfind(':');
    st.http_host = colon == std::string::npos || colon == 0 ? "127.0.0.1" : http.substr(0, colon);
    st.http_port = std::atoi(http.c_str() + (colon == std::string::npos ? 0 : colon + 1));
    if (st.http_port <= 0 || st.http_port > 65535) {
      std::cerr << "uma-soak: --http wants HOST:PORT, got '" << http << "'\n";
      return 2;
    }
  }
  st.max_prompt_bytes = static_cast<std::size_t>(max_prompt_bytes);
  st.max_frame_bytes = static_cast<std::size_t>(max_frame_bytes);
  st.http_max_body_bytes = static_cast<std::size_t>(http_max_body_kib) * 1024;
  st.chat = !no_chat && st.http_port > 0;
  st.timeout = std::chrono::milliseconds(static_cast<long long>(timeout * 1000));

  const Expectations expect(model);
  Tally tally;
  RunData d;
  d.clients = clients;
  d.seed = seed;
  d.planned_s = run_s;
  d.warmup_s = warm_s;
  d.rss_growth_max_pct = rss_max_pct;

  // The daemon answers on both front ends (the model is loaded).
  if (!poll_until(120, [&] { return fetch_metrics(st.socket_path, std::chrono::milliseconds(5000)).ok; }) ||
      (st.http_port > 0 && !poll_until(120, [&] { return http_healthy(st); }))) {
    std::cerr << "uma-soak: umad does not answer on " << st.socket_path << (http.empty() ? "" : " / " + http) << "\n";
    return 1;
  }
  // Baseline before the first client connects: descriptors steady over two reads.
  ProcSample last = read_proc(pid);
  poll_until(10, [&] {
    const ProcSample now = read_proc(pid);
    const bool same = now.fds == last.fds;
    last = now;
    return same;
  });
  d.proc_baseline = last;
  d.metrics_baseline = fetch_metrics(st.socket_path, std::chrono::milliseconds(5000));
  if (!d.proc_baseline.alive || !d.metrics_baseline.ok) {
    std::cerr << "uma-soak: cannot read the daemon's baseline (pid " << pid << ")\n";
    return 1;
  }
  std::fprintf(stderr, "uma-soak: %d clients for %.0f s (warm-up %.0f s), baseline RSS %lld kB, %lld fds\n", clients,
               run_s, warm_s, static_cast<long long>(d.proc_baseline.rss_kb), static_cast<long long>(d.proc_baseline.fds));

  Monitor monitor(pid, st.socket_path, std::chrono::milliseconds(static_cast<long long>(sample_every * 1000)));
  monitor.start();
  const Clock::time_point t0 = monitor.started_at();
  const Clock::time_point end = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(run_s));
  std::atomic<bool> stop{false};
  st.stop = &stop;
  std::vector<std::thread> threads;
  for (int i = 0; i < clients; ++i) {
    const Front front = st.http_port > 0 && i % 2 == 1 ? Front::kHttp : Front::kUds;
    threads.emplace_back([&, i, front] {
      ClientState c(i, front, seed * 1000003 + static_cast<std::uint64_t>(i), st, expect, tally);
      while (!stop && Clock::now() < end) {
        c.iteration++;
        c.sub = 0;
        const Action a = pick_action(c);
        front == Front::kUds ? run_uds(c, a) : run_http(c, a);
      }
    });
  }
  // Progress now and then; stop early if the daemon died.
  const double report_every = std::clamp(run_s / 10, 10.0, 120.0);
  Clock::time_point next_report = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(report_every));
  while (Clock::now() < end && !monitor.daemon_gone()) {
    std::this_thread::sleep_until(std::min(end, Clock::now() + std::chrono::seconds(1)));  // a timer, not synchronisation
    if (Clock::now() >= next_report) {
      next_report += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(report_every));
      const std::vector<Sample> s = monitor.samples();
      const ProcSample p = s.empty() ? ProcSample{} : s.back().proc;
      std::fprintf(stderr, "uma-soak: %4.0f s  requests %lld  unexpected %lld  RSS %lld kB  fds %lld  kv_tokens %lld\n",
                   std::chrono::duration<double>(Clock::now() - t0).count(), static_cast<long long>(tally.total_requests()),
                   static_cast<long long>(tally.total(Outcome::kUnexpected)), static_cast<long long>(p.rss_kb),
                   static_cast<long long>(p.fds), static_cast<long long>(s.empty() ? 0 : s.back().metrics.kv_tokens_used));
    }
  }
  stop = true;
  for (std::thread& t : threads) t.join();
  d.run_s = std::chrono::duration<double>(Clock::now() - t0).count();

  // Settle: every session ended, KV given back, descriptors back to the baseline.
  const Clock::time_point settle_start = Clock::now();
  d.settled = poll_until(settle, [&] {
    d.proc_end = read_proc(pid);  // first: the metrics connection below is not counted
    if (!d.proc_end.alive) return true;
    d.metrics_end = fetch_metrics(st.socket_path, std::chrono::milliseconds(5000));
    const MetricsSample& m = d.metrics_end;
    return m.ok && m.active_sessions == 0 && m.queued_sessions == 0 && m.kv_tokens_used == 0 && m.kv_sequences_used == 0 &&
           m.kv_cells_granted == 0 && d.proc_end.fds == d.proc_baseline.fds;
  }) && d.proc_end.alive;
  d.settle_s = std::chrono::duration<double>(Clock::now() - settle_start).count();
  monitor.stop();
  d.samples = monitor.samples();
  d.daemon_gone = monitor.daemon_gone() || !d.proc_end.alive;

  const Verdict v = evaluate(d, tally);
  print_summary(d, tally, v);
  const std::string line = json_line(d, tally, v);
  std::printf("%s\n", line.c_str());
  if (!json_out.empty()) std::ofstream(json_out) << line << '\n';
  if (!samples_csv.empty()) write_csv(samples_csv, d.samples);
  return v.pass ? 0 : 1;
}

}  // namespace
}  // namespace uma::soak

int main(int argc, char** argv) { return uma::soak::run(argc, argv); }
