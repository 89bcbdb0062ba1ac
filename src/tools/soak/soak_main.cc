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

#include "httpkit/http_wire.h"
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
  if (!s.send_all(http_request({.target = "/health", .host = "soak", .keep_alive = false}), deadline, &err)) return false;
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

// The flags as given; Settings' own fields are filled by CLI directly.
struct SoakFlags {
  Settings st;
  int pid = 0, clients = 32, max_prompt_bytes = 65536, max_frame_bytes = 1 << 20, http_max_body_kib = 1024;
  std::string model, http, duration_s = "30m", warmup_s, samples_csv, json_out;
  double sample_every = 5, timeout = 120, settle = 60, rss_max_pct = 2.0;
  std::uint64_t seed = 1;
  bool no_chat = false;
};

void add_soak_flags(CLI::App& app, SoakFlags& f) {
  app.add_option("--socket", f.st.socket_path, "umad's Unix socket (framed JSON)")->required();
  app.add_option("--http", f.http, "umad's HTTP front end, HOST:PORT (without it every client uses the socket)");
  app.add_option("--pid", f.pid, "umad's process id (RSS and descriptors from /proc)")->required()->check(CLI::PositiveNumber);
  app.add_option("--model", f.model, "the oracle model umad serves (its vocabulary gives the expected texts)")
      ->required()->check(CLI::ExistingFile);
  app.add_option("-c,--clients", f.clients, "client threads, alternately UDS and HTTP")->capture_default_str()->check(CLI::Range(1, 1024));
  app.add_option("-d,--duration", f.duration_s, "how long: seconds, or with a unit: 90s, 30m, 1h")->capture_default_str();
  app.add_option("--warmup", f.warmup_s, "warm-up excluded from the RSS growth (default: 2 min, at most half the run)");
  app.add_option("--sample-every", f.sample_every, "seconds between daemon samples")->capture_default_str()->check(CLI::Range(0.1, 600.0));
  app.add_option("--seed", f.seed, "random seed (actions, prompts, sizes)")->capture_default_str();
  app.add_option("--timeout", f.timeout, "seconds a read may wait before it is an unexpected stall")->capture_default_str()
      ->check(CLI::Range(1.0, 3600.0));
  app.add_option("--settle", f.settle, "seconds to wait at the end for KV, sessions and descriptors to go back")
      ->capture_default_str()->check(CLI::Range(1.0, 3600.0));
  app.add_option("--rss-growth-max", f.rss_max_pct, "most RSS growth after warm-up, percent")->capture_default_str();
  app.add_option("--n-ctx", f.st.n_ctx, "umad's --n-ctx")->capture_default_str()->check(CLI::Range(16, 1 << 20));
  app.add_option("--max-tokens", f.st.max_tokens_cap, "umad's --max-tokens")->capture_default_str()->check(CLI::Range(8, 1 << 20));
  app.add_option("--max-prompt-bytes", f.max_prompt_bytes, "umad's --max-prompt-bytes")->capture_default_str()->check(CLI::Range(1, 64 << 20));
  app.add_option("--max-frame-bytes", f.max_frame_bytes, "umad's --max-frame-bytes")->capture_default_str()->check(CLI::Range(64, 256 << 20));
  app.add_option("--http-max-body-kib", f.http_max_body_kib, "umad's --http-max-body-kib")->capture_default_str()->check(CLI::Range(1, 1 << 20));
  app.add_flag("--no-chat", f.no_chat, "umad has no chat template: no /v1/chat/completions requests");
  app.add_option("--samples-csv", f.samples_csv, "write every daemon sample here");
  app.add_option("--json-out", f.json_out, "also write the JSON result line here");
}

// The run's length and warm-up, and the clients' settings, from the flags; false (said on
// stderr) when they do not hold together.
bool derive_soak_settings(SoakFlags& f, double* run_s, double* warm_s) {
  *run_s = parse_duration(f.duration_s);
  if (*run_s <= 0) {
    std::cerr << "uma-soak: bad --duration '" << f.duration_s << "'\n";
    return false;
  }
  *warm_s = f.warmup_s.empty() ? std::min(120.0, *run_s / 2) : parse_duration(f.warmup_s);
  if (*warm_s < 0 || *warm_s >= *run_s) {
    std::cerr << "uma-soak: --warmup must be shorter than the run\n";
    return false;
  }
  Settings& st = f.st;
  if (!f.http.empty()) {
    const auto colon = f.http.rfind(':');
    st.http_host = colon == std::string::npos || colon == 0 ? "127.0.0.1" : f.http.substr(0, colon);
    st.http_port = std::atoi(f.http.c_str() + (colon == std::string::npos ? 0 : colon + 1));
    if (st.http_port <= 0 || st.http_port > 65535) {
      std::cerr << "uma-soak: --http wants HOST:PORT, got '" << f.http << "'\n";
      return false;
    }
  }
  st.max_prompt_bytes = static_cast<std::size_t>(f.max_prompt_bytes);
  st.max_frame_bytes = static_cast<std::size_t>(f.max_frame_bytes);
  st.http_max_body_bytes = static_cast<std::size_t>(f.http_max_body_kib) * 1024;
  st.chat = !f.no_chat && st.http_port > 0;
  st.timeout = std::chrono::milliseconds(static_cast<long long>(f.timeout * 1000));
  return true;
}

// The daemon answers on both front ends (the model is loaded), then its baseline before the
// first client connects: descriptors steady over two reads. False (said on stderr) when either fails.
bool take_daemon_baseline(const SoakFlags& f, RunData& d) {
  const Settings& st = f.st;
  if (!poll_until(120, [&] { return fetch_metrics(st.socket_path, std::chrono::milliseconds(5000)).ok; }) ||
      (st.http_port > 0 && !poll_until(120, [&] { return http_healthy(st); }))) {
    std::cerr << "uma-soak: umad does not answer on " << st.socket_path << (f.http.empty() ? "" : " / " + f.http) << "\n";
    return false;
  }
  ProcSample last = read_proc(f.pid);
  poll_until(10, [&] {
    const ProcSample now = read_proc(f.pid);
    const bool same = now.fds == last.fds;
    last = now;
    return same;
  });
  d.proc_baseline = last;
  d.metrics_baseline = fetch_metrics(st.socket_path, std::chrono::milliseconds(5000));
  if (!d.proc_baseline.alive || !d.metrics_baseline.ok) {
    std::cerr << "uma-soak: cannot read the daemon's baseline (pid " << f.pid << ")\n";
    return false;
  }
  return true;
}

// Progress now and then until `end`; sooner if the daemon died.
void watch_soak_progress(const Monitor& monitor, const Tally& tally, Clock::time_point t0, Clock::time_point end, double run_s) {
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
}

// The clients, alternately over the socket and HTTP, each a random action at a time until the
// run ends (or the daemon dies).
void run_soak_clients(SoakFlags& f, const Expectations& expect, Tally& tally, const Monitor& monitor, RunData& d) {
  Settings& st = f.st;
  const Clock::time_point t0 = monitor.started_at();
  const Clock::time_point end = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(d.planned_s));
  std::atomic<bool> stop{false};
  st.stop = &stop;
  std::vector<std::thread> threads;
  for (int i = 0; i < f.clients; ++i) {
    const Front front = st.http_port > 0 && i % 2 == 1 ? Front::kHttp : Front::kUds;
    threads.emplace_back([&, i, front] {
      ClientState c(i, front, f.seed * 1000003 + static_cast<std::uint64_t>(i), st, expect, tally);
      while (!stop && Clock::now() < end) {
        c.iteration++;
        c.sub = 0;
        const Action a = pick_action(c);
        front == Front::kUds ? run_uds(c, a) : run_http(c, a);
      }
    });
  }
  watch_soak_progress(monitor, tally, t0, end, d.planned_s);
  stop = true;
  for (std::thread& t : threads) t.join();
  d.run_s = std::chrono::duration<double>(Clock::now() - t0).count();
}

// Settle: every session ended, KV given back, descriptors back to the baseline.
void settle_daemon(const SoakFlags& f, RunData& d) {
  const Clock::time_point settle_start = Clock::now();
  d.settled = poll_until(f.settle, [&] {
    d.proc_end = read_proc(f.pid);  // first: the metrics connection below is not counted
    if (!d.proc_end.alive) return true;
    d.metrics_end = fetch_metrics(f.st.socket_path, std::chrono::milliseconds(5000));
    const MetricsSample& m = d.metrics_end;
    return m.ok && m.active_sessions == 0 && m.queued_sessions == 0 && m.kv_tokens_used == 0 && m.kv_sequences_used == 0 &&
           m.kv_cells_granted == 0 && d.proc_end.fds == d.proc_baseline.fds;
  }) && d.proc_end.alive;
  d.settle_s = std::chrono::duration<double>(Clock::now() - settle_start).count();
}

// The summary, the JSON line (and its files); 0 when every check passed.
int report_soak(const SoakFlags& f, const RunData& d, const Tally& tally) {
  const Verdict v = evaluate(d, tally);
  print_summary(d, tally, v);
  const std::string line = json_line(d, tally, v);
  std::printf("%s\n", line.c_str());
  if (!f.json_out.empty()) std::ofstream(f.json_out) << line << '\n';
  if (!f.samples_csv.empty()) write_csv(f.samples_csv, d.samples);
  return v.pass ? 0 : 1;
}

int run(int argc, char** argv) {
  CLI::App app{"uma-soak: a long mixed workload against umad over both front ends, with exact checks and leak checks"};
  SoakFlags f;
  add_soak_flags(app, f);
  CLI11_PARSE(app, argc, argv);
  double run_s = 0, warm_s = 0;
  if (!derive_soak_settings(f, &run_s, &warm_s)) return 2;

  const Expectations expect(f.model);
  Tally tally;
  RunData d;
  d.clients = f.clients;
  d.seed = f.seed;
  d.planned_s = run_s;
  d.warmup_s = warm_s;
  d.rss_growth_max_pct = f.rss_max_pct;
  if (!take_daemon_baseline(f, d)) return 1;
  std::fprintf(stderr, "uma-soak: %d clients for %.0f s (warm-up %.0f s), baseline RSS %lld kB, %lld fds\n", f.clients,
               run_s, warm_s, static_cast<long long>(d.proc_baseline.rss_kb), static_cast<long long>(d.proc_baseline.fds));

  Monitor monitor(f.pid, f.st.socket_path, std::chrono::milliseconds(static_cast<long long>(f.sample_every * 1000)));
  monitor.start();
  run_soak_clients(f, expect, tally, monitor, d);
  settle_daemon(f, d);
  monitor.stop();
  d.samples = monitor.samples();
  d.daemon_gone = monitor.daemon_gone() || !d.proc_end.alive;
  return report_soak(f, d, tally);
}

}  // namespace
}  // namespace uma::soak

int main(int argc, char** argv) { return uma::soak::run(argc, argv); }
