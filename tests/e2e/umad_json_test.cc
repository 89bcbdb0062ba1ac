// End-to-end over the framed JSON protocol (the default), with the oracle model.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <thread>

#include "client/uma_client.h"
#include "e2e/daemon_harness.h"
#include "e2e/json_helpers.h"
#include "e2e/oracle.h"
#include "ipc/frame_codec.h"

namespace uma::test {
namespace {

using namespace std::chrono_literals;

TEST(UmadJson, StreamsTheOracleContinuationThenEosWithUsageTimingsAndMetadata) {
  Daemon d(args({"--max-tokens", "64"}));
  ASSERT_TRUE(d.started()) << d.log();
  auto c = connect(d);
  WireRequest r = request("req-1", "hello world", 20);
  r.metadata_json = R"({"tenant":"acme","trace":[1,2,3]})";
  ASSERT_TRUE(c->send_request(r).ok());
  const Reply reply = read_reply(*c);
  EXPECT_EQ(reply.text, oracle().expected_text("hello world", 20));
  EXPECT_EQ(reply.end.kind, WireEvent::Kind::kEos);
  EXPECT_EQ(reply.end.id, "req-1");
  EXPECT_EQ(reply.end.reason, "length");
  EXPECT_EQ(reply.end.prompt_tokens, 3);
  EXPECT_EQ(reply.end.completion_tokens, 20);
  EXPECT_GE(reply.end.ttft_ms, 0.0);
  EXPECT_GE(reply.end.total_ms, reply.end.ttft_ms);
  // A lone stream moves the weights once per token: its share is at least the weights' size.
  EXPECT_GE(reply.end.bytes_per_token, static_cast<double>(std::filesystem::file_size(model_path("oracle.gguf"))) * 0.5);
  EXPECT_EQ(nlohmann::json::parse(reply.end.metadata_json), nlohmann::json::parse(r.metadata_json));
  EXPECT_TRUE(reply.closed_after) << "without keep_alive the server closes after eos";
}

TEST(UmadJson, APredictionIsVerifiedAndTheEosUsageSaysWhatItGave) {
  Daemon d(args({"--max-tokens", "64", "--speculative", "lookup", "--speculative-force"}));
  ASSERT_TRUE(d.started()) << d.log();
  const std::string expected = oracle().expected_text("the quiet harbour", 24);
  for (bool with : {false, true}) {
    auto c = connect(d);
    WireRequest r = request(with ? "with" : "without", "the quiet harbour", 24);
    if (with) r.prediction = expected;
    ASSERT_TRUE(c->send_request(r).ok());
    const Reply reply = read_reply(*c);
    EXPECT_EQ(reply.text, expected) << with;
    ASSERT_EQ(reply.end.kind, WireEvent::Kind::kEos);
    if (!with) {
      EXPECT_EQ(reply.end.accepted_prediction_tokens, -1) << "not in usage without a prediction";
      continue;
    }
    EXPECT_GE(reply.end.accepted_prediction_tokens, 0);
    EXPECT_GE(reply.end.rejected_prediction_tokens, 0);
    EXPECT_GT(reply.end.accepted_prediction_tokens + reply.end.rejected_prediction_tokens, 0) << "its tokens were verified";
  }
}

TEST(UmadJson, KeepAliveServesSeveralRequestsAndStreamFalseSendsOneEvent) {
  Daemon d(args({"--max-tokens", "64"}));
  ASSERT_TRUE(d.started()) << d.log();
  auto c = connect(d);
  WireRequest a = request("a", "the apple", 12);
  a.keep_alive = true;
  ASSERT_TRUE(c->send_request(a).ok());
  EXPECT_EQ(read_reply(*c, false).text, oracle().expected_text("the apple", 12));
  WireRequest b = request("b", "the river", 15);
  b.keep_alive = true;
  b.stream = false;
  ASSERT_TRUE(c->send_request(b).ok());
  const Reply rb = read_reply(*c, false);
  EXPECT_EQ(rb.tokens, 0) << "stream:false sends no token events";
  EXPECT_EQ(rb.end.kind, WireEvent::Kind::kEos);
  EXPECT_EQ(rb.end.text, oracle().expected_text("the river", 15));
  ASSERT_TRUE(c->send_request(request("c", "the stone", 5)).ok());  // no keep_alive: last one
  const Reply rc = read_reply(*c);
  EXPECT_EQ(rc.text, oracle().expected_text("the stone", 5));
  EXPECT_TRUE(rc.closed_after);
}

TEST(UmadJson, LogprobsComeWithEachTokenOrAllInTheEos) {
  Daemon d(args({"--max-tokens", "64"}));
  ASSERT_TRUE(d.started()) << d.log();
  auto c = connect(d);
  WireRequest r = request("lp", "hello world", 12);
  r.sampling.logprobs = 2;
  r.keep_alive = true;
  ASSERT_TRUE(c->send_request(r).ok());
  const Reply streamed = read_reply(*c, false);
  EXPECT_EQ(streamed.text, oracle().expected_text("hello world", 12));
  ASSERT_EQ(streamed.logprobs.size(), 12u) << "an entry per token";
  std::string bytes;
  for (std::size_t i = 0; i < streamed.logprobs.size(); ++i) {
    const LogprobEntry& e = streamed.logprobs[i];
    EXPECT_EQ(e.chosen.token, streamed.token_ids[i]);
    EXPECT_LE(e.chosen.logprob, 0.0f);
    ASSERT_EQ(e.top.size(), 2u);
    EXPECT_EQ(e.top[0].token, e.chosen.token) << "greedy picks the most likely token";
    EXPECT_GE(e.top[0].logprob, e.top[1].logprob);
    bytes += e.chosen.text;
  }
  EXPECT_EQ(bytes, streamed.text) << "the entries' bytes spell the reply";
  r.id = "lp2";
  r.stream = false;
  r.keep_alive = false;
  ASSERT_TRUE(c->send_request(r).ok());
  const Reply whole = read_reply(*c);
  EXPECT_EQ(whole.tokens, 0);
  ASSERT_EQ(whole.logprobs.size(), 12u) << "stream:false: every entry in the eos";
  for (std::size_t i = 0; i < 12; ++i) EXPECT_EQ(whole.logprobs[i].chosen.token, streamed.logprobs[i].chosen.token);
}

TEST(UmadJson, ByteAtATimeFramesWork) {
  Daemon d(args({}));
  ASSERT_TRUE(d.started()) << d.log();
  auto c = connect(d);
  std::string frame;
  append_frame(frame, encode_request(request("slow", "the music", 8)));
  for (char ch : frame) {
    ASSERT_TRUE(c->send_raw(std::string_view(&ch, 1)).ok());
    std::this_thread::sleep_for(1ms);  // bytes apart, to arrive apart (a busy machine may still join some)
  }
  EXPECT_EQ(read_reply(*c).text, oracle().expected_text("the music", 8));
}

TEST(UmadJson, TwoFramesInOneWriteTheSecondRequestIsBusy) {
  Daemon d(args({"--max-tokens", "64"}));
  ASSERT_TRUE(d.started()) << d.log();
  auto c = connect(d);
  WireRequest first = request("first", "the garden", 30);
  first.keep_alive = true;
  std::string both;
  append_frame(both, encode_request(first));
  append_frame(both, encode_request(request("second", "the window", 5)));
  ASSERT_TRUE(c->send_raw(both).ok());
  std::string text;
  bool busy_seen = false;
  WireEvent ev;
  while (c->read_event(&ev, kHangGuardMs).ok()) {
    if (ev.kind == WireEvent::Kind::kError) {
      EXPECT_EQ(ev.id, "second");
      EXPECT_EQ(ev.code, "E_BUSY");
      busy_seen = true;
    } else if (ev.kind == WireEvent::Kind::kToken) {
      EXPECT_EQ(ev.id, "first");
      text += ev.text;
    } else if (ev.kind == WireEvent::Kind::kEos) {
      EXPECT_EQ(ev.id, "first");
      break;
    }
  }
  EXPECT_TRUE(busy_seen);
  EXPECT_EQ(ev.kind, WireEvent::Kind::kEos) << "timed out waiting for the first request's end";
  EXPECT_EQ(text, oracle().expected_text("the garden", 30));
}

// Sends raw bytes on a fresh connection; returns the first event and whether the server closed
// (nothing more came: the read ends on the close, or at the hang guard).
std::pair<WireEvent, bool> send_and_read(const Daemon& d, const std::string& bytes) {
  auto c = connect(d);
  EXPECT_TRUE(c->send_raw(bytes).ok());
  WireEvent ev;
  EXPECT_TRUE(c->read_event(&ev, kHangGuardMs).ok()) << "timed out waiting for the error event";
  WireEvent after;
  const bool closed = !c->read_event(&after, kHangGuardMs).ok();
  return {ev, closed};
}

std::string framed(const std::string& payload) {
  std::string f;
  append_frame(f, payload);
  return f;
}

TEST(UmadJson, ProtocolErrorsAreTypedEventsThenClose) {
  Daemon d(args({"--max-frame-bytes", "4096", "--max-prompt-bytes", "1000", "--max-tokens", "300",
                 "--n-ctx", "256"}));
  ASSERT_TRUE(d.started()) << d.log();
  const char huge[4] = {0x00, 0x00, 0x10, 0x00};  // announces 1 MiB
  auto [e1, c1] = send_and_read(d, std::string(huge, 4));
  EXPECT_EQ(e1.code, "E_PROTO_FRAME_TOO_LARGE");
  EXPECT_TRUE(c1);
  auto [e2, c2] = send_and_read(d, framed("{\"id\": \"x\", prompt"));
  EXPECT_EQ(e2.code, "E_PROTO_INVALID_JSON");
  EXPECT_TRUE(c2);
  auto [e3, c3] = send_and_read(d, framed(R"({"id":"t","prompt":"hi","temperature":"warm"})"));
  EXPECT_EQ(e3.code, "E_PROTO_BAD_REQUEST");
  EXPECT_EQ(e3.id, "t");
  EXPECT_NE(e3.message.find("'temperature'"), std::string::npos) << e3.message;
  EXPECT_TRUE(c3);
  auto [e4, c4] = send_and_read(d, framed(R"({"id":"p","prompt":")" + std::string(1500, 'x') + "\"}"));
  EXPECT_EQ(e4.code, "E_LIMIT_PROMPT_TOO_LARGE");
  EXPECT_TRUE(c4);
  auto [e5, c5] = send_and_read(d, framed(encode_request(request("ctx", Oracle::long_prompt(100, "x"), 200))));
  EXPECT_EQ(e5.code, "E_LIMIT_CONTEXT");
  EXPECT_EQ(e5.id, "ctx");
  const auto m = metrics(d);
  EXPECT_EQ(m["errors_total"]["frame_too_large"], 1);
  EXPECT_EQ(m["errors_total"]["invalid_json"], 1);
  EXPECT_EQ(m["errors_total"]["bad_request"], 1);
  EXPECT_EQ(m["active_sessions"], 0);
  EXPECT_EQ(m["kv_tokens_used"], 0);
}

TEST(UmadJson, CancelEndsTheStreamWithACancelledEosAndFreesKv) {
  // 8000 tokens: the cancel lands long before the end, however slow the machine.
  Daemon d(args({"--max-tokens", "8000", "--n-ctx", "8192"}));
  ASSERT_TRUE(d.started()) << d.log();
  auto c = connect(d);
  ASSERT_TRUE(c->send_request(request("long", "hello world", 8000)).ok());
  WireEvent ev;
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(c->read_event(&ev, kHangGuardMs).ok()) << "timed out waiting for token " << i;
  ASSERT_TRUE(c->send_cancel("long").ok());
  int tokens_after_cancel = 0;
  while (c->read_event(&ev, kHangGuardMs).ok() && ev.kind == WireEvent::Kind::kToken) ++tokens_after_cancel;
  EXPECT_EQ(ev.kind, WireEvent::Kind::kEos) << "timed out waiting for the eos";
  EXPECT_EQ(ev.reason, "cancelled");
  EXPECT_LT(ev.completion_tokens, 8000);
  // Every token event is one the eos counts (the end may flush one more: a cut code point's
  // bytes). How many came after the cancel depends on how far the daemon ran ahead of this
  // client; cancel latency is measured by uma-protocol-bench.
  EXPECT_LE(5 + tokens_after_cancel, ev.completion_tokens + 1);
  const auto m = metrics(d);
  EXPECT_EQ(m["kv_tokens_used"], 0);
  EXPECT_EQ(m["active_sessions"], 0);
  EXPECT_EQ(m["requests_cancelled_total"], 1);
}

TEST(UmadJson, DisconnectMidStreamCancelsAndFreesKv) {
  // 8000 tokens: the disconnect lands long before the end, however slow the machine.
  Daemon d(args({"--max-tokens", "8000", "--n-ctx", "8192"}));
  ASSERT_TRUE(d.started()) << d.log();
  {
    auto c = connect(d);
    ASSERT_TRUE(c->send_request(request("gone", "hello world", 8000)).ok());
    WireEvent ev;
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(c->read_event(&ev, kHangGuardMs).ok()) << "timed out waiting for token " << i;
  }  // closed mid-stream
  nlohmann::json m;
  EXPECT_TRUE(eventually([&] {
    m = metrics(d);
    return m["requests_cancelled_total"] == 1 && m["kv_tokens_used"] == 0;
  }, "the disconnect to cancel the request and free its KV")) << m.dump();
  EXPECT_EQ(m["requests_cancelled_total"], 1);
  EXPECT_EQ(m["kv_tokens_used"], 0);
  EXPECT_EQ(m["active_sessions"], 0);
  EXPECT_LT(m["tokens_generated_total"].get<int>(), 8000);
}

TEST(UmadJson, OverloadIsRejectedAtOnceWithATypedError) {
  // With --preempt off a request is granted its worst case up front: room for one 3000-token reply
  // at a time, and no waiting queue: the second request is refused.
  Daemon d(args({"--n-ctx", "4096", "--max-queue", "0", "--preempt", "off"}));
  ASSERT_TRUE(d.started()) << d.log();
  auto a = connect(d);
  ASSERT_TRUE(a->send_request(request("a", "hello world", 3000)).ok());
  WireEvent ev;
  ASSERT_TRUE(a->read_event(&ev, kHangGuardMs).ok()) << "timed out waiting for a's first token";  // a is running
  auto b = connect(d);
  ASSERT_TRUE(b->send_request(request("b", "hello world", 3000)).ok());
  ASSERT_TRUE(b->read_event(&ev, kHangGuardMs).ok()) << "timed out waiting for b's answer";
  EXPECT_EQ(ev.kind, WireEvent::Kind::kError);
  EXPECT_EQ(ev.code, "E_OVERLOADED");
  ASSERT_TRUE(a->send_cancel("a").ok());
  EXPECT_EQ(read_reply(*a).end.reason, "cancelled");
  auto c = connect(d);  // room again once a is done
  ASSERT_TRUE(c->send_request(request("c", "hello world", 10)).ok());
  EXPECT_EQ(read_reply(*c).text, oracle().expected_text("hello world", 10));
}

TEST(UmadJson, StopStringSplitAcrossTokensEndsTheReplyAndIsNeverSent) {
  Daemon d(args({"--max-tokens", "64"}));
  ASSERT_TRUE(d.started()) << d.log();
  const std::vector<std::string> pieces = oracle().expected_pieces("hello world", 40);
  // A stop string made of the end of token 10's text and the start of token 11's.
  size_t k = 10;
  while (k + 1 < pieces.size() && (pieces[k].size() < 2 || pieces[k + 1].size() < 2)) ++k;
  ASSERT_LT(k + 1, pieces.size());
  const std::string stop = pieces[k].substr(pieces[k].size() - 2) + pieces[k + 1].substr(0, 2);
  std::string full;
  for (const auto& p : pieces) full += p;
  const std::string want = full.substr(0, full.find(stop));
  auto c = connect(d);
  WireRequest r = request("s", "hello world", 40);
  r.stop = {stop, "never-appears-anywhere"};
  ASSERT_TRUE(c->send_request(r).ok());
  const Reply reply = read_reply(*c);
  EXPECT_EQ(reply.text, want);
  EXPECT_EQ(reply.text.find(stop), std::string::npos);
  EXPECT_EQ(reply.end.reason, "stop");
  EXPECT_EQ(reply.end.completion_tokens, static_cast<int>(k) + 2);
}

TEST(UmadJson, MetricsFrameThenClose) {
  Daemon d(args({}));
  ASSERT_TRUE(d.started()) << d.log();
  auto c = connect(d);
  ASSERT_TRUE(c->send_metrics_request().ok());
  WireEvent ev;
  ASSERT_TRUE(c->read_event(&ev, kHangGuardMs).ok()) << "timed out waiting for the metrics frame";
  EXPECT_EQ(ev.kind, WireEvent::Kind::kMetrics);
  const auto j = nlohmann::json::parse(ev.raw);
  EXPECT_EQ(j["event"], "metrics");
  EXPECT_TRUE(j.contains("tokens_generated_total"));
  EXPECT_FALSE(c->read_event(&ev, kHangGuardMs).ok()) << "closed after the metrics frame";
}

// scripts/setup.sh puts promtool on PATH or into the cache's prefix.
std::string promtool() {
  const std::string unpacked = deps_prefix() + "/usr/bin/promtool";
  return ::access(unpacked.c_str(), X_OK) == 0 ? unpacked : "promtool";
}

TEST(UmadJson, HistogramsInTheJsonSnapshotAndPrometheusText) {
  Daemon d(args({"--max-tokens", "64"}));
  ASSERT_TRUE(d.started()) << d.log();
  for (int i = 0; i < 3; ++i) {
    auto c = connect(d);
    ASSERT_TRUE(c->send_request(request("h" + std::to_string(i), "the candle", 8)).ok());
    ASSERT_EQ(read_reply(*c).end.kind, WireEvent::Kind::kEos);
  }
  const auto m = metrics(d);
  EXPECT_EQ(m["histograms"]["ttft_ms"]["count"], 3);
  EXPECT_EQ(m["histograms"]["inter_token_ms"]["count"], 3 * 7);
  EXPECT_EQ(m["histograms"]["queue_ms"]["count"], 3);
  EXPECT_EQ(m["histograms"]["decode_ms"]["count"], m["batch_calls_total"]);
  std::string out;
  ASSERT_EQ(run_command({bin_path("uma-cli"), "-s", d.socket(), "metrics", "--prometheus"}, &out), 0) << out;
  EXPECT_NE(out.find("# TYPE uma_time_to_first_token_seconds histogram"), std::string::npos) << out;
  EXPECT_NE(out.find("uma_time_to_first_token_seconds_bucket{le=\"+Inf\"} 3\n"), std::string::npos) << out;
  EXPECT_NE(out.find("uma_inter_token_latency_seconds_count 21\n"), std::string::npos) << out;
  EXPECT_NE(out.find("uma_generation_tokens_total 24\n"), std::string::npos) << out;
  EXPECT_NE(out.find("uma_errors_total{kind=\"busy\"} 0\n"), std::string::npos) << out;
  // Prometheus's own linter accepts every series (names, types, suffixes, units, help).
  const std::string file = temp_dir() + "/metrics.prom";
  {
    std::ofstream f(file);
    f << out;
  }
  std::string lint;
  EXPECT_EQ(run_command({"/bin/sh", "-c", promtool() + " check metrics < " + file}, &lint), 0) << lint;
  EXPECT_EQ(lint, "") << lint;
}

TEST(UmadJson, UmaCliEndToEnd) {
  Daemon d(args({"--max-tokens", "64"}));
  ASSERT_TRUE(d.started()) << d.log();
  std::string out;
  EXPECT_EQ(run_command({bin_path("uma-cli"), "-s", d.socket(), "-n", "16", "hello world"}, &out), 0) << out;
  EXPECT_EQ(out, oracle().expected_text("hello world", 16) + "\n");
  EXPECT_EQ(run_command({"/bin/sh", "-c", "echo 'the apple' | " + bin_path("uma-cli") + " -s " + d.socket() +
                                          " -n 8 --no-stream"}, &out), 0);
  EXPECT_EQ(out, oracle().expected_text("the apple", 8) + "\n");
  EXPECT_EQ(run_command({bin_path("uma-cli"), "-s", d.socket(), "--json", "-n", "3", "hello world"}, &out), 0);
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 4) << out;  // 3 token events + eos
  EXPECT_NE(out.find("\"event\":\"eos\""), std::string::npos);
  EXPECT_EQ(run_command({bin_path("uma-cli"), "-s", d.socket(), "metrics"}, &out), 0);
  EXPECT_NE(out.find("\"event\":\"metrics\""), std::string::npos);
  EXPECT_EQ(run_command({bin_path("uma-cli"), "-s", d.socket(), "--temperature", "-1", "x"}, &out), 1);
  EXPECT_NE(out.find("E_PROTO_BAD_REQUEST"), std::string::npos) << out;
  EXPECT_EQ(run_command({bin_path("uma-cli"), "-s", temp_dir() + "/nobody.sock", "x"}, &out), 2);
}

TEST(UmadJson, CtrlCInUmaCliCancelsAndExitsAfterEos) {
  Daemon d(args({"--max-tokens", "8000", "--n-ctx", "8192"}));  // still streaming at the SIGINT
  ASSERT_TRUE(d.started()) << d.log();
  const std::string out_path = temp_dir() + "/cli-ctrlc.out";
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int fd = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 1);
    ::execl(bin_path("uma-cli").c_str(), "uma-cli", "-s", d.socket().c_str(), "hello world", nullptr);
    _exit(127);
  }
  // Wait until it streams, then interrupt it like a terminal would.
  const bool streaming = static_cast<bool>(
      eventually([&] { return metrics(d)["tokens_generated_total"].get<int>() >= 20; }, "uma-cli's stream to start"));
  ::kill(pid, SIGINT);
  const int rc = wait_exit(pid, kHangGuard);
  if (rc == -2) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  }
  ASSERT_TRUE(streaming) << "timed out waiting for uma-cli's stream to start";
  ASSERT_NE(rc, -2) << "timed out waiting for uma-cli to exit after SIGINT";
  EXPECT_EQ(rc, 130);
  const auto m = metrics(d);
  EXPECT_EQ(m["requests_cancelled_total"], 1);
  EXPECT_LT(m["tokens_generated_total"].get<int>(), 8000);
  EXPECT_EQ(m["kv_tokens_used"], 0);
}

}  // namespace
}  // namespace uma::test
