// uma-bench smoke runs against the real umad: the JSON report parses and counts what was sent.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "e2e/daemon_harness.h"
#include "e2e/http_client.h"
#include "e2e/json_helpers.h"

namespace uma::test {
namespace {

nlohmann::json bench(const Daemon& d, std::vector<std::string> args, std::string target = "") {
  std::vector<std::string> argv = {bin_path("uma-bench"), "--target", target.empty() ? "uds:" + d.socket() : target, "--json"};
  argv.insert(argv.end(), args.begin(), args.end());
  std::string out;
  EXPECT_EQ(run_command(argv, &out), 0) << out;
  const auto start = out.find('{');  // stderr's progress line comes first
  EXPECT_NE(start, std::string::npos) << out;
  return nlohmann::json::parse(out.substr(start));
}

TEST(UmaBench, ClosedLoopReportCountsEveryRequestAndToken) {
  Daemon d({"--protocol", "json", "--max-tokens", "64"});
  ASSERT_TRUE(d.started()) << d.log();
  // A TTFT target no request can miss within the hang guard: slo_met counts against a target, not speed.
  const std::string ttft_target = std::to_string(10 * std::chrono::milliseconds(kHangGuard).count());
  const auto j = bench(d, {"-c", "2", "-n", "6", "--prompt-tokens", "16", "--output-tokens", "8", "--slo-ttft-ms", ttft_target});
  ASSERT_EQ(j["runs"].size(), 1u);
  const auto& r = j["runs"][0];
  EXPECT_EQ(r["requests"], 6);
  EXPECT_EQ(r["ok"], 6);
  EXPECT_EQ(r["output_tokens"], 6 * 8);  // the oracle never emits end-of-generation here
  EXPECT_GE(r["prompt_tokens"].get<int>(), 6 * 16);
  EXPECT_EQ(r["ttft_ms"]["n"], 6);
  EXPECT_EQ(r["itl_ms"]["n"], 6 * 7);
  EXPECT_EQ(r["slo_met"], 6);
  EXPECT_GT(r["output_tok_s"].get<double>(), 0);
  EXPECT_TRUE(r["errors"].empty());
}

TEST(UmaBench, OpenLoopMixedAndSweepWorkloads) {
  Daemon d({"--protocol", "json", "--max-tokens", "64", "--n-ctx", "8192"});
  ASSERT_TRUE(d.started()) << d.log();
  const auto open = bench(d, {"--rate", "20", "-n", "5", "--prompt-tokens", "8", "--output-tokens", "4"});
  EXPECT_EQ(open["runs"][0]["ok"], 5);
  const auto mixed = bench(d, {"--workload", "mixed", "-c", "2", "-d", "3", "--prompt-tokens", "8", "--output-tokens",
                               "16", "--background-prompt-tokens", "300", "--background-every-s", "1"});
  ASSERT_EQ(mixed["runs"].size(), 2u);
  EXPECT_EQ(mixed["runs"][0]["label"], "interactive");
  EXPECT_GT(mixed["runs"][0]["ok"].get<int>(), 0);
  EXPECT_EQ(mixed["runs"][1]["label"], "background");
  EXPECT_GE(mixed["runs"][1]["ok"].get<int>(), 1);
  EXPECT_GE(mixed["runs"][1]["prompt_tokens"].get<int>(), 300);
  const auto sweep = bench(d, {"--workload", "sweep", "--sweep", "32,256", "-n", "2", "--output-tokens", "4"});
  ASSERT_EQ(sweep["runs"].size(), 2u);
  EXPECT_EQ(sweep["runs"][1]["label"], "prompt=256");
  EXPECT_EQ(sweep["runs"][1]["ok"], 2);
}

TEST(UmaBench, ErrorsAreCountedByKind) {
  Daemon d({"--protocol", "json", "--n-ctx", "256"});  // 200-token prompts + max_tokens 100 do not fit
  ASSERT_TRUE(d.started()) << d.log();
  const auto j = bench(d, {"-n", "3", "--prompt-tokens", "200", "--output-tokens", "100", "--warmup", "0"});
  EXPECT_EQ(j["runs"][0]["ok"], 0);
  EXPECT_EQ(j["runs"][0]["errors"]["E_LIMIT_CONTEXT"], 3);
}

// Over HTTP, with and without --keep-alive: every request served, and the connections umad
// accepted say whether they were reused (2 clients: at most 2 connections for 1 warm-up + 6
// requests; 1 when one client's requests all ran before the other's first).
TEST(UmaBench, HttpKeepAliveReusesAConnectionPerClient) {
  Daemon d(http_args({"--max-tokens", "64"}));
  ASSERT_TRUE(d.started()) << d.log();
  const std::string target = "http://127.0.0.1:" + std::to_string(http_port(d));
  for (const bool keep_alive : {true, false}) {
    const auto before = metrics(d)["connections_accepted_total"].get<int>();
    std::vector<std::string> args = {"-c", "2", "-n", "6", "--prompt-tokens", "16", "--output-tokens", "8"};
    if (keep_alive) args.push_back("--keep-alive");
    const auto j = bench(d, args, target);
    EXPECT_EQ(j["runs"][0]["ok"], 6) << j.dump();
    EXPECT_EQ(j["runs"][0]["output_tokens"], 6 * 8);
    EXPECT_EQ(j["runs"][0]["itl_ms"]["n"], 6 * 7);
    // Less the metrics read's own connection (each read counts its own).
    const auto accepted = metrics(d)["connections_accepted_total"].get<int>() - before - 1;
    if (keep_alive) {
      EXPECT_GE(accepted, 1);
      EXPECT_LE(accepted, 2) << "kept alive";
    } else {
      EXPECT_EQ(accepted, 7) << "a connection per request";
    }
  }
}

}  // namespace
}  // namespace uma::test
