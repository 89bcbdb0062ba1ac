#include "daemon/config.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "daemon/daemon_flags.h"

namespace uma {
namespace {

// Flags as a parse of `--model FILE` leaves them (the file need not exist: derive does not look).
DaemonFlags model_flags() {
  DaemonFlags f;
  f.config.models = {"/models/m.gguf"};
  return f;
}

Status derive(DaemonFlags f, DaemonConfig* out, std::vector<std::string>* notes = nullptr) {
  std::vector<std::string> ignored;
  return derive_daemon_config(f, out, notes ? notes : &ignored);
}

TEST(DaemonConfigDerive, TheKvLayoutFollowsTheSessionsAndSetsTheSequences) {
  DaemonFlags f = model_flags();
  f.config.server.max_sessions = 4;
  DaemonConfig c;
  ASSERT_TRUE(derive(f, &c).ok());
  EXPECT_EQ(c.runtime.kv_layout, KvLayout::kPerSeq);
  EXPECT_EQ(c.runtime.n_seq_max, 4);  // a kept prefix stays in its session's stream
  EXPECT_EQ(c.runtime.model_path, "/models/m.gguf");

  f.config.server.max_sessions = 1;
  ASSERT_TRUE(derive(f, &c).ok());
  EXPECT_EQ(c.runtime.kv_layout, KvLayout::kUnified);
  EXPECT_EQ(c.runtime.n_seq_max, 1 + c.scheduler.prefix.max_kept);  // kept prefixes take ids of their own

  f.kv_layout = "unified";
  f.prefix_cache = false;
  f.config.server.max_sessions = 8;
  ASSERT_TRUE(derive(f, &c).ok());
  EXPECT_EQ(c.runtime.kv_layout, KvLayout::kUnified);
  EXPECT_EQ(c.runtime.n_seq_max, 8);  // no cache, no kept prefixes
}

TEST(DaemonConfigDerive, ABatchBelowTheSequencesIsRaisedAndSaid) {
  DaemonFlags f = model_flags();
  f.config.server.max_sessions = 16;
  f.config.runtime.n_batch = 4;
  DaemonConfig c;
  std::vector<std::string> notes;
  ASSERT_TRUE(derive(f, &c, &notes).ok());
  EXPECT_EQ(c.runtime.n_batch, 16);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("n-batch raised to 16"), std::string::npos) << notes[0];
}

TEST(DaemonConfigDerive, ModesBecomeWhatTheSchedulerAndRuntimeRead) {
  DaemonFlags f = model_flags();
  f.preempt = "recompute";
  f.prefill_policy = "slo-balance";
  f.speculative = "off";
  f.flash_attn = "off";
  f.backend_sampling = "on";
  f.protocol = "newline";
  f.threads = "3";
  DaemonConfig c;
  ASSERT_TRUE(derive(f, &c).ok());
  EXPECT_TRUE(c.scheduler.preemption);
  EXPECT_EQ(c.scheduler.park, ParkPreference::kRecompute);
  EXPECT_TRUE(c.scheduler.slo_prefill);
  EXPECT_FALSE(c.scheduler.slo_fill);
  EXPECT_FALSE(c.scheduler.speculate);
  EXPECT_EQ(c.runtime.outputs_per_seq, 1);  // no drafts to verify
  EXPECT_EQ(c.runtime.verify_outputs, 0);
  EXPECT_EQ(c.runtime.flash_attn, FlashAttention::kOff);
  EXPECT_EQ(c.runtime.backend_sampling, DeviceSampling::kOn);
  EXPECT_EQ(c.server.protocol, ProtocolKind::kNewline);
  EXPECT_FALSE(c.threads_auto);
  EXPECT_EQ(c.runtime.n_threads, 3);

  f.preempt = "off";
  f.prefill_policy = "gap";
  f.speculative = "lookup";
  ASSERT_TRUE(derive(f, &c).ok());
  EXPECT_FALSE(c.scheduler.preemption);
  EXPECT_FALSE(c.scheduler.slo_prefill);
  EXPECT_EQ(c.runtime.outputs_per_seq, c.scheduler.draft_max + 1);
  // Nothing is saved when nothing is paused: the page-locked arena holds the prefixes alone.
  EXPECT_EQ(c.runtime.kv_host_arena_bytes, std::min<std::uint64_t>(std::uint64_t{1} << 30, c.scheduler.prefix.host_bytes));

  f.kv_layout = "sideways";
  const Status st = derive(f, &c);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("--kv-layout"), std::string::npos);
}

TEST(DaemonConfigDerive, RefusesWhatAParserCannotCheckNamingTheFlag) {
  const auto refused = [](DaemonFlags f, const std::string& says) {
    DaemonConfig c;
    const Status st = derive(std::move(f), &c);
    EXPECT_FALSE(st.ok()) << says;
    EXPECT_NE(st.message().find(says), std::string::npos) << st.message();
  };
  DaemonFlags f = model_flags();
  f.http_listen = "127.0.0.1:8080";
  f.http_port = 9000;
  refused(f, "not both");
  f = model_flags();
  f.config.agent = true;
  refused(f, "--agent needs --http");
  f = model_flags();
  f.api_key = "k";
  f.api_key_file = "/nonexistent";
  refused(f, "give one");
  f = DaemonFlags();
  refused(f, "is required");
  f = DaemonFlags();
  f.config.models_dir = "/models";
  refused(f, "served over --http");
  f = model_flags();
  f.http_listen = "127.0.0.1:eighty";
  refused(f, "--http wants HOST:PORT");
  f = model_flags();
  f.config.server.socket_path.clear();
  refused(f, "--socket");
}

TEST(DaemonConfigDerive, TheHttpFrontEndFromEitherForm) {
  DaemonFlags f = model_flags();
  f.http_listen = "0.0.0.0:9123";
  f.no_metrics = true;
  DaemonConfig c;
  ASSERT_TRUE(derive(f, &c).ok());
  EXPECT_TRUE(c.http_enabled);
  EXPECT_EQ(c.http.host, "0.0.0.0");
  EXPECT_EQ(c.http.port, 9123);
  EXPECT_FALSE(c.http.metrics_endpoint);
  EXPECT_TRUE(c.http.slots_endpoint);

  f = model_flags();
  f.http_hosts = "127.0.0.1,::1";
  f.http_port = 0;
  ASSERT_TRUE(derive(f, &c).ok());
  EXPECT_EQ(c.http.host, "127.0.0.1");
  EXPECT_EQ(c.http.more_hosts, std::vector<std::string>{"::1"});
  EXPECT_EQ(c.http.port, 0);
}

// The parse: a flag given through its UMA_* twin counts as given, and --print-config prints what
// the daemon would run with (keys only as "set") and exits 0.
TEST(DaemonConfigParse, TwinsCountAsGivenAndPrintConfigShowsTheEffectiveConfig) {
  char model_path[] = "/tmp/uma-config-test-XXXXXX";
  const int fd = ::mkstemp(model_path);
  ASSERT_GE(fd, 0);
  ::close(fd);
  ::setenv("UMA_MAX_PROMPT_BYTES", "70000", 1);
  ::setenv("UMA_KV_LAYOUT", "unified", 1);
  std::vector<std::string> args = {"umad", "--model", model_path, "--max-sessions", "4", "--min-prefill", "32",
                                   "--api-key", "secret-key", "--http", "8181"};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  DaemonConfig c;
  int exit_code = 0;
  ASSERT_TRUE(parse_daemon_config(static_cast<int>(argv.size()), argv.data(), c, &exit_code).ok());
  EXPECT_EQ(exit_code, -1);  // keep running
  EXPECT_TRUE(c.prompt_limit_given);
  EXPECT_EQ(c.server.limits.max_prompt_bytes, 70000u);
  EXPECT_FALSE(c.frame_limit_given);
  EXPECT_TRUE(c.min_prefill_given);
  EXPECT_EQ(c.scheduler.per_seq_min_prefill, 32);
  EXPECT_EQ(c.runtime.kv_layout, KvLayout::kUnified);

  args.push_back("--print-config");
  argv.clear();
  for (std::string& a : args) argv.push_back(a.data());
  testing::internal::CaptureStdout();
  DaemonConfig printed;
  ASSERT_TRUE(parse_daemon_config(static_cast<int>(argv.size()), argv.data(), printed, &exit_code).ok());
  const std::string out = testing::internal::GetCapturedStdout();
  ::unsetenv("UMA_MAX_PROMPT_BYTES");
  ::unsetenv("UMA_KV_LAYOUT");
  std::remove(model_path);
  EXPECT_EQ(exit_code, 0);
  const auto j = nlohmann::json::parse(out);
  EXPECT_EQ(j["context"]["kv_layout"], "unified");
  EXPECT_EQ(j["context"]["sequences"], 4 + c.scheduler.prefix.max_kept);
  EXPECT_EQ(j["sessions"]["max_prompt_bytes"], 70000);
  EXPECT_EQ(j["sessions"]["max_frame_bytes"], "from the context");
  EXPECT_EQ(j["scheduling"]["min_prefill"], 32);
  EXPECT_EQ(j["http"]["port"], 8181);
  EXPECT_EQ(j["http"]["api_key"], "set");
  EXPECT_EQ(out.find("secret-key"), std::string::npos);
}

}  // namespace
}  // namespace uma
