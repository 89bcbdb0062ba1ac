// uma-bench: a serving benchmark for umad (framed JSON over UDS) and any OpenAI-compatible server
// (HTTP + SSE), so the same workload measures both. See docs/BENCHMARKS.md.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>
#include <thread>

#include <unistd.h>

#include "tools/bench/stats.h"
#include "tools/bench/targets.h"
#include "tools/bench/workload.h"

namespace uma::bench {
namespace {

using MakeRequest = std::function<BenchRequest(int index)>;

struct Progress {
  std::atomic<int> started{0}, done{0}, errors{0};
  std::atomic<bool> stop{false};
};

struct Limits {
  int requests = 0;      // 0: no count limit
  double duration_s = 0; // 0: no time limit
  bool allows(int index, Clock::time_point start) const {
    if (requests > 0 && index >= requests) return false;
    if (duration_s > 0 && std::chrono::duration<double>(Clock::now() - start).count() >= duration_s) return false;
    return requests > 0 || duration_s > 0;
  }
};

void record(std::vector<RequestRecord>& out, std::mutex& mu, Progress& p, RequestRecord r) {
  p.done++;
  if (!r.ok) p.errors++;
  std::lock_guard<std::mutex> lock(mu);
  out.push_back(std::move(r));
}

// Closed loop: `concurrency` clients, each sending its next request when the last one ends.
void run_closed(Target& t, const MakeRequest& make, int concurrency, const Limits& lim, Progress& p,
                std::vector<RequestRecord>& out, std::mutex& mu) {
  std::atomic<int> next{0};
  const Clock::time_point start = Clock::now();
  std::vector<std::thread> workers;
  for (int w = 0; w < concurrency; ++w) {
    workers.emplace_back([&] {
      for (int i = next++; lim.allows(i, start) && !p.stop; i = next++) {
        p.started++;
        RequestRecord r = t.run(make(i));
        r.index = i;
        record(out, mu, p, std::move(r));
      }
    });
  }
  for (auto& w : workers) w.join();
}

// Open loop: arrivals at fixed mean `rate` per second (Poisson, or a fixed interval when
// `poisson` is false), whatever the server's speed.
void run_open(Target& t, const MakeRequest& make, double rate, bool poisson, std::uint64_t seed, const Limits& lim,
              Progress& p, std::vector<RequestRecord>& out, std::mutex& mu) {
  std::mt19937_64 rng(seed);
  std::exponential_distribution<double> gap(rate);
  const Clock::time_point start = Clock::now();
  Clock::time_point at = start;
  std::vector<std::thread> flights;
  for (int i = 0; lim.allows(i, start) && !p.stop; ++i) {
    // An arrival past the run's end is not waited for.
    if (lim.duration_s > 0 && at >= start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(lim.duration_s))) break;
    std::this_thread::sleep_until(at);
    if (!lim.allows(i, start)) break;
    p.started++;
    flights.emplace_back([&, req = make(i)] { record(out, mu, p, t.run(req)); });
    at += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(poisson ? gap(rng) : 1.0 / rate));
  }
  for (auto& f : flights) f.join();
}

nlohmann::ordered_json to_json(const Summary& s) {
  return {{"p50", s.p50}, {"p90", s.p90}, {"p95", s.p95}, {"p99", s.p99}, {"max", s.max}, {"mean", s.mean}, {"n", s.n}};
}

nlohmann::ordered_json to_json(const std::string& label, const RunReport& r) {
  nlohmann::ordered_json j;
  j["label"] = label;
  j["requests"] = r.requests;
  j["ok"] = r.ok;
  j["errors"] = r.errors;
  j["duration_s"] = r.duration_s;
  j["prompt_tokens"] = r.prompt_tokens;
  j["output_tokens"] = r.output_tokens;
  j["output_tok_s"] = r.output_tok_s;
  j["requests_s"] = r.requests_s;
  j["slo_met"] = r.slo_met;
  j["goodput_req_s"] = r.goodput_req_s;
  j["ttft_ms"] = to_json(r.ttft_ms);
  j["tpot_ms"] = to_json(r.tpot_ms);
  j["itl_ms"] = to_json(r.itl_ms);
  j["e2e_ms"] = to_json(r.e2e_ms);
  return j;
}

void print_table(const std::vector<std::pair<std::string, RunReport>>& runs) {
  std::printf("%-14s %5s %5s %9s %8s | %-27s | %-27s | %-27s\n", "run", "ok", "err", "out tok/s", "good/s",
              "TTFT ms p50/p90/p99/max", "TPOT ms p50/p90/p99/max", "ITL ms p50/p90/p99/max");
  for (const auto& [label, r] : runs) {
    auto q = [](const Summary& s) {
      char b[64];
      std::snprintf(b, sizeof b, "%.0f/%.0f/%.0f/%.0f", s.p50, s.p90, s.p99, s.max);
      return std::string(b);
    };
    std::size_t errs = 0;
    for (const auto& [k, v] : r.errors) errs += v;
    std::printf("%-14s %5zu %5zu %9.1f %8.2f | %-27s | %-27s | %-27s\n", label.c_str(), r.ok, errs, r.output_tok_s,
                r.goodput_req_s, q(r.ttft_ms).c_str(), q(r.tpot_ms).c_str(), q(r.itl_ms).c_str());
    for (const auto& [k, v] : r.errors) std::printf("  errors %s: %zu\n", k.c_str(), v);
  }
}

std::vector<RequestRecord> only(const std::vector<RequestRecord>& all, const std::string& klass) {
  std::vector<RequestRecord> out;
  for (const auto& r : all) if (r.klass == klass) out.push_back(r);
  return out;
}

}  // namespace
}  // namespace uma::bench

namespace {
// Every request of the run carries the same JSON schema.
class WithSchema final : public uma::bench::Target {
 public:
  WithSchema(std::unique_ptr<Target> inner, std::string schema) : inner_(std::move(inner)), schema_(std::move(schema)) {}
  uma::bench::RequestRecord run(const uma::bench::BenchRequest& r) override {
    uma::bench::BenchRequest with = r;
    with.json_schema = schema_;
    return inner_->run(with);
  }
  std::string describe() const override { return inner_->describe() + " (json_schema)"; }

 private:
  std::unique_ptr<Target> inner_;
  std::string schema_;
};

// Fixed output lengths: every request runs to its max_tokens (ignore_eos) or at least min_tokens,
// as the benchmark clients that compare servers ask (guidellm, inference-perf, aiperf).
class FixedLength final : public uma::bench::Target {
 public:
  FixedLength(std::unique_ptr<Target> inner, bool ignore_eos, int min_tokens)
      : inner_(std::move(inner)), ignore_eos_(ignore_eos), min_tokens_(min_tokens) {}
  uma::bench::RequestRecord run(const uma::bench::BenchRequest& r) override {
    uma::bench::BenchRequest with = r;
    with.ignore_eos = ignore_eos_;
    with.min_tokens = min_tokens_;
    return inner_->run(with);
  }
  std::string describe() const override {
    return inner_->describe() + (ignore_eos_ ? " (ignore_eos)" : "") +
           (min_tokens_ > 0 ? " (min_tokens " + std::to_string(min_tokens_) + ")" : "");
  }

 private:
  std::unique_ptr<Target> inner_;
  bool ignore_eos_;
  int min_tokens_;
};
}  // namespace


namespace uma::bench {
namespace {

// The flags as given.
struct BenchFlags {
  std::string target_spec = "uds:/tmp/uma.sock", workload = "random";
  int concurrency = 1, requests = 0, prompt_tokens = 128, output_tokens = 64, warmup = 1;
  int prefix_tokens = 1000, suffix_tokens = 30, bg_prompt_tokens = 2000, bg_output_tokens = 16;
  double rate = 0, duration = 0, bg_every_s = 2.0, bg_start_s = -1;
  std::vector<int> sweep = {128, 512, 1024, 2048};
  SloTargets slo;
  std::uint64_t seed = 1;
  bool as_json = false;
  int groups = 4, users = 4;
  std::string schema_file;
  bool ignore_eos = false;
  int min_tokens = 0;
  bool keep_alive = false;
};

void add_bench_flags(CLI::App& app, BenchFlags& f) {
  app.add_option("--target", f.target_spec, "uds:PATH (umad) or http://HOST:PORT (OpenAI /v1/completions)")->capture_default_str();
  app.add_option("--workload", f.workload, "random | shared-prefix | groups | mixed | sweep")->capture_default_str()
      ->check(CLI::IsMember({"random", "shared-prefix", "groups", "mixed", "sweep"}));
  app.add_option("-c,--concurrency", f.concurrency, "closed loop: concurrent streams (mixed: interactive streams)")
      ->capture_default_str()->check(CLI::Range(1, 4096));
  app.add_option("--rate", f.rate, "open loop: Poisson arrivals per second (instead of --concurrency)")->check(CLI::Range(0.0, 1e6));
  app.add_option("-n,--requests", f.requests, "requests to send (per sweep point)");
  app.add_option("-d,--duration", f.duration, "seconds to run");
  app.add_option("--prompt-tokens", f.prompt_tokens, "prompt length (random, mixed interactive)")->capture_default_str();
  app.add_option("--output-tokens", f.output_tokens, "max_tokens per request")->capture_default_str();
  app.add_option("--prefix-tokens", f.prefix_tokens, "shared-prefix: shared system prompt length")->capture_default_str();
  app.add_option("--suffix-tokens", f.suffix_tokens, "shared-prefix: unique suffix length; groups: one turn's length")
      ->capture_default_str();
  app.add_option("--groups", f.groups, "groups: groups of users, each with its own system prompt (--prefix-tokens)")
      ->capture_default_str()->check(CLI::Range(1, 1000));
  app.add_option("--users", f.users, "groups: users per group, each a multi-turn conversation")->capture_default_str()
      ->check(CLI::Range(1, 1000));
  app.add_option("--background-prompt-tokens", f.bg_prompt_tokens, "mixed: long background prompt length")->capture_default_str();
  app.add_option("--background-output-tokens", f.bg_output_tokens, "mixed: background max_tokens")->capture_default_str();
  app.add_option("--background-every-s", f.bg_every_s, "mixed: one background prompt every this many seconds")->capture_default_str();
  app.add_option("--background-start-s", f.bg_start_s, "mixed: first background prompt after this many seconds "
                 "(default: min(1, every))");
  app.add_option("--sweep", f.sweep, "sweep: prompt lengths")->delimiter(',');
  app.add_option("--slo-ttft-ms", f.slo.ttft_ms, "goodput: TTFT target (0: none)");
  app.add_option("--slo-tpot-ms", f.slo.tpot_ms, "goodput: time-per-output-token target (0: none)");
  app.add_option("--warmup", f.warmup, "requests sent first and not recorded")->capture_default_str();
  app.add_option("--seed", f.seed, "prompt and arrival seed")->capture_default_str();
  app.add_flag("--json", f.as_json, "print the report as JSON");
  app.add_option("--json-schema", f.schema_file, "uds: targets only: every request's output must match this JSON "
                 "schema (file)")->check(CLI::ExistingFile);
  app.add_flag("--ignore-eos", f.ignore_eos, "every request generates exactly --output-tokens (vLLM's ignore_eos; "
               "umad, vLLM and llama-server take it)");
  app.add_option("--min-tokens", f.min_tokens, "no request ends before this many tokens (vLLM's min_tokens)")
      ->check(CLI::Range(0, 1 << 20));
  app.add_flag("--keep-alive", f.keep_alive, "http: targets: reuse connections across requests, as SDK clients do "
               "(default: a connection per request)");
}

// The target named by --target, wrapped for --json-schema and fixed output lengths; nullptr
// (said on stderr) when it cannot be.
std::unique_ptr<Target> open_bench_target(const BenchFlags& f) {
  std::string err;
  std::unique_ptr<Target> target = make_target(f.target_spec, &err, f.keep_alive);
  if (!target) {
    std::cerr << "uma-bench: " << err << "\n";
    return nullptr;
  }
  if (!f.schema_file.empty()) {
    if (f.target_spec.rfind("uds:", 0) != 0) {
      std::cerr << "uma-bench: --json-schema needs a uds: target\n";
      return nullptr;
    }
    std::ifstream in(f.schema_file);
    target = std::make_unique<WithSchema>(std::move(target),
                                          std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()));
  }
  if (f.ignore_eos || f.min_tokens > 0) target = std::make_unique<FixedLength>(std::move(target), f.ignore_eos, f.min_tokens);
  return target;
}

// Request i of a random prompt of `len` words.
MakeRequest interactive_requests(const BenchFlags& f, int len) {
  return [&f, len](int i) {
    PromptMaker m(f.seed * 1000003 + static_cast<std::uint64_t>(i));
    return BenchRequest{"r" + std::to_string(i), m.words(len), f.output_tokens, "interactive", {}};
  };
}

MakeRequest shared_prefix_requests(const BenchFlags& f, const std::string& prefix) {
  return [&f, &prefix](int i) {
    PromptMaker m(f.seed * 1000003 + static_cast<std::uint64_t>(i));
    return BenchRequest{"p" + std::to_string(i), prefix + " " + m.words(f.suffix_tokens), f.output_tokens, "interactive", {}};
  };
}

// The groups workload's rounds: each round's order of conversations, built on first use (requests
// are made on many threads).
struct ConversationRounds {
  std::vector<std::vector<int>> order;
  std::mutex mu;
};

// Round r (requests r*G*U ..) holds turn r of every conversation, G groups x U users, in a
// seeded shuffled order: a request is the group's system prompt, then every earlier turn of the
// user's, then the new one (the llm-d / SGLang shared-prefix shape: a long per-group prefix, a
// growing per-user history). Shuffled, because in a fixed cycle round-robin over A agents
// sends a group to the same agent every time whenever A divides G: cache-affine by accident.
MakeRequest group_conversation_requests(const BenchFlags& f, ConversationRounds& rounds) {
  const int per_round = f.groups * f.users;
  return [&f, &rounds, per_round](int i) {
    int conversation = i % per_round;
    const int turn = i >= 1000000 ? 0 : i / per_round;  // a warm-up request (1000000 + k) opens a conversation
    if (i < 1000000) {
      const std::lock_guard<std::mutex> lock(rounds.mu);
      while (static_cast<int>(rounds.order.size()) <= turn) {
        std::vector<int> round(static_cast<std::size_t>(per_round));
        for (int k = 0; k < per_round; ++k) round[static_cast<std::size_t>(k)] = k;
        std::mt19937_64 rng(f.seed * 7919 + rounds.order.size());
        std::shuffle(round.begin(), round.end(), rng);
        rounds.order.push_back(std::move(round));
      }
      conversation = rounds.order[static_cast<std::size_t>(turn)][static_cast<std::size_t>(conversation)];
    }
    const int g = conversation % f.groups, u = conversation / f.groups;
    std::string prompt = PromptMaker(f.seed * 31 + static_cast<std::uint64_t>(g)).words(f.prefix_tokens);
    for (int t = 0; t <= turn; ++t) {
      PromptMaker m(f.seed * 1000003 + static_cast<std::uint64_t>(((g * 1000 + u) * 1000) + t));
      prompt += " " + m.words(f.suffix_tokens);
    }
    return BenchRequest{"g" + std::to_string(g) + "u" + std::to_string(u) + "t" + std::to_string(turn), prompt,
                        f.output_tokens, "interactive", {}};
  };
}

// Progress on stderr: rewritten in place on a terminal, one line every 5 s otherwise (logs).
std::thread start_progress_ticker(const Progress& progress, const std::string& workload) {
  const bool tty = ::isatty(2) != 0;
  return std::thread([&progress, &workload, tty] {
    for (int tick = 0; !progress.stop; ++tick) {
      if (tty || tick % 50 == 0) {
        std::fprintf(stderr, "%s[uma-bench] %s: started %d, done %d, errors %d%s", tty ? "\r" : "", workload.c_str(),
                     progress.started.load(), progress.done.load(), progress.errors.load(), tty ? "   " : "\n");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (tty) std::fprintf(stderr, "\n");
  });
}

// What the runs measured, for the report.
struct BenchResults {
  std::vector<std::pair<std::string, RunReport>> runs;
  std::optional<ItlSplit> split;  // mixed only
};

// One closed-loop run of a single stream per --sweep prompt length.
void run_sweep(Target& target, const BenchFlags& f, Progress& progress, BenchResults& results) {
  std::mutex mu;
  for (int len : f.sweep) {
    std::vector<RequestRecord> point;
    run_closed(target, interactive_requests(f, len), 1, Limits{f.requests, 0}, progress, point, mu);
    results.runs.emplace_back("prompt=" + std::to_string(len), build_report(point, f.slo));
  }
}

// Interactive streams run closed-loop while long background prompts arrive at a fixed interval.
void run_mixed(Target& target, const BenchFlags& f, const MakeRequest& make, Progress& progress, BenchResults& results) {
  std::vector<RequestRecord> records;
  std::mutex mu;
  std::thread background([&] {
    MakeRequest bg = [&](int i) {
      PromptMaker m(f.seed * 7919 + static_cast<std::uint64_t>(i));
      return BenchRequest{"bg" + std::to_string(i), m.words(f.bg_prompt_tokens), f.bg_output_tokens, "background", {}};
    };
    // The first long prompt arrives once the streams are running (and, with --background-start-s,
    // have shown their steady cadence for a while).
    const double start_s = f.bg_start_s >= 0 ? f.bg_start_s : std::min(1.0, f.bg_every_s);
    std::this_thread::sleep_for(std::chrono::duration<double>(start_s));
    // At least one prompt, however short the run.
    const double span = f.duration > 0 ? std::max(f.duration - start_s, 1e-3) : f.bg_every_s;
    run_open(target, bg, 1.0 / f.bg_every_s, false, f.seed, Limits{0, span}, progress, records, mu);
  });
  run_closed(target, make, f.concurrency, Limits{f.duration > 0 ? 0 : f.requests, f.duration}, progress, records, mu);
  background.join();
  const std::vector<RequestRecord> streams = only(records, "interactive");
  const std::vector<RequestRecord> long_prompts = only(records, "background");
  results.runs.emplace_back("interactive", build_report(streams, f.slo));
  results.runs.emplace_back("background", build_report(long_prompts, f.slo));
  results.split = split_itl_by_prefill(streams, long_prompts);
}

// random, shared-prefix and groups: open loop at --rate, else closed loop at --concurrency.
void run_single_workload(Target& target, const BenchFlags& f, const MakeRequest& make, Progress& progress,
                         BenchResults& results) {
  std::vector<RequestRecord> records;
  std::mutex mu;
  const Limits lim{f.requests, f.duration};
  if (f.rate > 0) {
    run_open(target, make, f.rate, true, f.seed, lim, progress, records, mu);
    results.runs.emplace_back(f.workload, build_report(records, f.slo));
    return;
  }
  run_closed(target, make, f.concurrency, lim, progress, records, mu);
  results.runs.emplace_back(f.workload, build_report(records, f.slo));
  if (f.workload == "groups") {
    // The first round opens every conversation: under any policy its requests wait for a prefix
    // nobody holds yet (a group's users arrive together). What routing changes shows after.
    std::vector<RequestRecord> later;
    for (const RequestRecord& r : records) {
      if (r.index >= f.groups * f.users) later.push_back(r);
    }
    results.runs.emplace_back("groups-after-first-round", build_report(later, f.slo));
  }
}

void print_json_report(const Target& target, const BenchFlags& f, const BenchResults& results) {
  nlohmann::ordered_json j;
  j["target"] = target.describe();
  j["workload"] = f.workload;
  j["concurrency"] = f.concurrency;
  j["rate"] = f.rate;
  j["seed"] = f.seed;
  j["slo"] = {{"ttft_ms", f.slo.ttft_ms}, {"tpot_ms", f.slo.tpot_ms}};
  j["runs"] = nlohmann::ordered_json::array();
  for (const auto& [label, r] : results.runs) j["runs"].push_back(to_json(label, r));
  if (results.split) {
    j["interactive_itl_split"] = {{"steady_ms", to_json(results.split->steady_ms)},
                                  {"during_prefill_ms", to_json(results.split->during_prefill_ms)}};
  }
  std::cout << j.dump(2) << "\n";
}

void print_text_report(const Target& target, const BenchFlags& f, const BenchResults& results) {
  std::printf("target: %s, workload: %s\n", target.describe().c_str(), f.workload.c_str());
  print_table(results.runs);
  if (results.split) {
    const Summary& st = results.split->steady_ms;
    const Summary& du = results.split->during_prefill_ms;
    std::printf("interactive ITL ms, steady: p50 %.0f p99 %.0f max %.0f (n %zu); during long-prompt prefill: p50 %.0f "
                "p99 %.0f max %.0f (n %zu); max / steady p50 = %.2f\n", st.p50, st.p99, st.max, st.n, du.p50, du.p99,
                du.max, du.n, st.p50 > 0 ? du.max / st.p50 : 0.0);
  }
}

}  // namespace
}  // namespace uma::bench

int main(int argc, char** argv) {
  using namespace uma::bench;
  CLI::App app{"uma-bench: serving benchmark for umad and OpenAI-compatible servers"};
  BenchFlags f;
  add_bench_flags(app, f);
  CLI11_PARSE(app, argc, argv);
  if (f.requests <= 0 && f.duration <= 0) f.requests = f.workload == "sweep" ? 3 : 16;

  std::unique_ptr<Target> target = open_bench_target(f);
  if (!target) return 2;
  const std::string prefix = PromptMaker(f.seed).words(f.prefix_tokens);
  ConversationRounds rounds;
  MakeRequest make = f.workload == "shared-prefix" ? shared_prefix_requests(f, prefix)
                     : f.workload == "groups"      ? group_conversation_requests(f, rounds)
                                                   : interactive_requests(f, f.prompt_tokens);

  Progress progress;
  std::thread ticker = start_progress_ticker(progress, f.workload);
  for (int i = 0; i < f.warmup; ++i) target->run(make(1000000 + i));  // prompts differ per --seed

  BenchResults results;
  if (f.workload == "sweep") {
    run_sweep(*target, f, progress, results);
  } else if (f.workload == "mixed") {
    run_mixed(*target, f, make, progress, results);
  } else {
    run_single_workload(*target, f, make, progress, results);
  }
  progress.stop = true;
  ticker.join();

  if (f.as_json) {
    print_json_report(*target, f, results);
  } else {
    print_text_report(*target, f, results);
  }
  return 0;
}
