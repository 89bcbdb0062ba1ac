// End-to-end admission on the oracle model: max_tokens up to the context (absent: to its end) on
// every front end, KV granted as it is used (16 early-stopping requests asking for 4096 tokens
// decode at once), and KV exhaustion under 16 long generations resolved by preemption with every
// output exact.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "e2e/held_stream.h"
#include "e2e/http_client.h"
#include "e2e/json_helpers.h"
#include "e2e/oracle.h"

namespace uma::test {
namespace {

using json = nlohmann::json;

int prompt_tokens(const std::string& prompt) { return static_cast<int>(oracle().tokenize(prompt).size()); }

TEST(UmadAdmission, WithoutMaxTokensGenerationRunsExactlyToTheContextsEnd) {
  Daemon d(args({"--n-ctx", "1024"}));
  ASSERT_TRUE(d.started()) << d.log();
  auto c = connect(d);
  WireRequest r = request("a", "hello world", 1);
  r.max_tokens.reset();
  ASSERT_TRUE(c->send_request(r).ok());
  const Reply reply = read_reply(*c);
  const int n = 1024 - prompt_tokens("hello world");
  EXPECT_EQ(reply.end.reason, "length");
  EXPECT_EQ(reply.end.completion_tokens, n);
  EXPECT_EQ(reply.text, oracle().expected_text("hello world", n));
}

TEST(UmadAdmission, LargeMaxTokensIsAcceptedOnEveryFrontEndAndTooLargeNamesTheField) {
  Daemon d(http_args({"--n-ctx", "4096"}));
  ASSERT_TRUE(d.started()) << d.log();
  // The lengths that fit: half the context and more in the plain build. The sanitizers check our
  // code on the same path at half the tokens (each token is the same work in our code).
  constexpr int kFramed = kSanitized ? 1024 : 2060, kHttp = kSanitized ? 256 : 1024, kCli = kSanitized ? 400 : 700;
  // Framed JSON, HTTP (the new user's first request: curl ... "max_tokens": 1024) and uma-cli -n
  // at once, sharing the context's cells and its ticks; each exact to the last token.
  auto c = connect(d);
  ASSERT_TRUE(c->send_request(request("a", "hello world", kFramed)).ok());
  Reply big;
  std::thread framed([&] { big = read_reply(*c, false); });
  std::string cli_out;
  int cli_rc = -1;
  std::thread cli([&] {
    cli_rc = run_command({bin_path("uma-cli"), "-s", d.socket(), "-n", std::to_string(kCli), "hello world"}, &cli_out);
  });
  const int port = http_port(d);
  Tcp t(port);
  const bool sent = t.send(post("/v1/completions",
                                R"({"prompt":"hello world","max_tokens":)" + std::to_string(kHttp) + R"(,"temperature":0})"));
  std::string resp = sent ? t.response() : "";
  framed.join();
  cli.join();
  EXPECT_EQ(big.end.reason, "length");
  EXPECT_EQ(big.end.completion_tokens, kFramed);
  EXPECT_EQ(big.text, oracle().expected_text("hello world", kFramed));
  ASSERT_EQ(cli_rc, 0) << cli_out;
  EXPECT_NE(cli_out.find(oracle().expected_text("hello world", kCli)), std::string::npos);
  ASSERT_TRUE(sent);
  ASSERT_EQ(status_of(resp), 200) << resp;
  json j = json::parse(body_of(resp));
  EXPECT_EQ(j["choices"][0]["text"], oracle().expected_text("hello world", kHttp));
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  // Then what cannot fit, on both protocols: the error names the field and the context.
  auto c2 = connect(d);
  ASSERT_TRUE(c2->send_request(request("b", "hello world", 4094)).ok());
  const Reply over = read_reply(*c2, false);
  EXPECT_EQ(over.end.code, "E_LIMIT_CONTEXT");
  EXPECT_EQ(over.end.param, "max_tokens");
  Tcp t2(port);  // t sat idle through the longer streams: past the keep-alive timeout it may be closed
  ASSERT_TRUE(t2.send(post("/v1/completions", R"({"prompt":"hello world","max_tokens":4094})")));
  resp = t2.response();
  ASSERT_EQ(status_of(resp), 400) << resp;
  j = json::parse(body_of(resp));
  EXPECT_EQ(j["error"]["param"], "max_tokens");
  EXPECT_EQ(j["error"]["type"], "exceed_context_size_error") << "llama-server's type, which its clients look for";
  EXPECT_NE(j["error"]["message"].get<std::string>().find("4096"), std::string::npos) << j.dump();
}

// 16 prompts, each with the stop string that ends its reply after `n` tokens.
struct Stopping {
  std::string prompt, stop, expected;
};
std::vector<Stopping> stopping_requests(int n) {
  std::vector<Stopping> v;
  for (int k = 0; k < 16; ++k) {
    Stopping s;
    s.prompt = "hello world " + std::to_string(100 + k);
    const std::vector<std::string> pieces = oracle().expected_pieces(s.prompt, n + 1);
    s.stop = pieces.at(static_cast<std::size_t>(n));
    s.expected = oracle().expected_text(s.prompt, n);
    EXPECT_EQ((s.expected + s.stop).find(s.stop), s.expected.size()) << "the stop string must not occur earlier";
    v.push_back(std::move(s));
  }
  return v;
}

TEST(UmadAdmission, SixteenEarlyStoppingRequestsAskingFor4096AllDecodeAtOnce) {
  Daemon d(args({"--n-ctx", "8192", "--max-sessions", "16"}));
  ASSERT_TRUE(d.started()) << d.log();
  // Before, each was granted 4096+ cells up front, so at most one ran in 8192 cells at a time.
  const std::vector<Stopping> reqs = stopping_requests(400);
  // All connected first: the 16 requests go out back to back, each with 400 tokens to run.
  std::vector<std::unique_ptr<UmaClient>> clients;
  for (int k = 0; k < 16; ++k) clients.push_back(connect(d));
  for (int k = 0; k < 16; ++k) {
    WireRequest r = request("r" + std::to_string(k), reqs[k].prompt, 4096);
    r.stop = {reqs[k].stop};
    ASSERT_TRUE(clients[k]->send_request(r).ok());
  }
  // Wait on the gauge itself: all 16 in decode at once, or one done without it (a failure).
  std::int64_t most = 0;
  EXPECT_TRUE(eventually([&] {
    const json m = metrics(d);
    most = std::max<std::int64_t>(most, m["sessions_by_state"]["decode"].get<std::int64_t>());
    return most == 16 || m["requests_completed_total"].get<std::int64_t>() > 0;
  }, "all 16 in decode, or one done"));
  EXPECT_EQ(most, 16) << "the sessions-in-decode gauge";
  for (int k = 0; k < 16; ++k) {
    const Reply r = read_reply(*clients[k], false);
    EXPECT_EQ(r.text, reqs[k].expected) << k;
    EXPECT_EQ(r.end.reason, "stop") << k;
    EXPECT_EQ(r.end.completion_tokens, 401) << k << " (the stop string's token counts)";
  }
  const json m = metrics(d);
  EXPECT_EQ(m["preempted_kv_full_total"], 0) << m.dump();
}

TEST(UmadAdmission, KvExhaustionUnderSixteenLongGenerationsIsResolvedByPreemptionExactly) {
  // 16 x (4 + kTokens) cells are asked for over time, four times the cells that exist.
  constexpr int kTokens = 250;
  const std::string cells = "1024";
  for (const char* mode : {"save", "recompute"}) {
    SCOPED_TRACE(mode);
    Daemon d(args({"--n-ctx", cells, "--max-sessions", "16", "--preempt", mode}));
    ASSERT_TRUE(d.started()) << d.log();
    // All connected first: the 16 requests go out back to back and outgrow the cells together.
    std::vector<std::unique_ptr<UmaClient>> clients;
    std::vector<std::string> prompts;
    for (int k = 0; k < 16; ++k) {
      prompts.push_back("hello world " + std::to_string(200 + k));
      clients.push_back(connect(d));
    }
    for (int k = 0; k < 16; ++k) {
      ASSERT_TRUE(clients[k]->send_request(request("r" + std::to_string(k), prompts[k], kTokens)).ok());
    }
    std::vector<Reply> replies(16);
    std::vector<std::thread> readers;
    for (int k = 0; k < 16; ++k) readers.emplace_back([&, k] { replies[k] = read_reply(*clients[k], false); });
    for (auto& t : readers) t.join();
    for (int k = 0; k < 16; ++k) {
      EXPECT_EQ(replies[k].end.reason, "length") << k << " " << replies[k].end.code << " " << replies[k].end.message;
      EXPECT_EQ(replies[k].text, oracle().expected_text(prompts[k], kTokens)) << k;
    }
    const json m = metrics(d);
    EXPECT_GT(m["preempted_kv_full_total"].get<int>(), 0) << m.dump();
    EXPECT_EQ(m["resumed_total"], m["preempted_kv_full_total"]) << "every pause resumed";
    EXPECT_EQ(m["kv_exhausted_total"], 0) << "the claims matched llama.cpp's cells: no decode failed";
    EXPECT_EQ(m["histograms"]["paused_ms"]["count"], m["resumed_total"]);
    EXPECT_EQ(m["kv_cells_granted"], 0);
    EXPECT_EQ(m["parked_bytes"], 0);
    EXPECT_EQ(m["errors_total"]["context_exceeded"], 0);
  }
}

// One --max-sessions for both front ends, and a slot per request: an idle keep-alive connection
// holds none (it once held its slot until it closed and locked other clients out), a running
// request on the Unix socket fills the one slot for HTTP too, and its end frees it for either.
// With no line for a session (--max-queue 0) a full server refuses at once.
TEST(UmadAdmission, OneSessionLimitForBothFrontEndsAndASlotPerRequest) {
  Daemon d(http_args({"--max-sessions", "1", "--n-ctx", "8192", "--max-queue", "0"}));
  ASSERT_TRUE(d.started()) << d.log();
  const int port = http_port(d);
  ASSERT_GT(port, 0) << d.log();
  const auto http_completion = [&](int max_tokens) {
    Tcp t(port);
    EXPECT_TRUE(t.send(post("/v1/completions", R"({"model":"m","prompt":"hello world","max_tokens":)" +
                                                   std::to_string(max_tokens) + "}", false)));
    return t.response();
  };
  // A keep-alive client finishes a request and stays connected, idle.
  auto idle = connect(d);
  WireRequest a = request("a", "the apple", 5);
  a.keep_alive = true;
  ASSERT_TRUE(idle->send_request(a).ok());
  EXPECT_EQ(read_reply(*idle, false).text, oracle().expected_text("the apple", 5));
  json m = wait_metrics_json(d, [](const json& j) { return j["sessions_open"] == 0; });
  EXPECT_EQ(m["sessions_open"], 0) << "timed out waiting for the finished request to give its slot back";
  // Another Unix-socket client and an HTTP client are served meanwhile.
  auto other = connect(d);
  ASSERT_TRUE(other->send_request(request("b", "the river", 5)).ok());
  const Reply rb = read_reply(*other);
  EXPECT_EQ(rb.text, oracle().expected_text("the river", 5)) << rb.end.code << " " << rb.end.message;
  const std::string ok = http_completion(5);
  EXPECT_EQ(status_of(ok), 200) << ok;
  EXPECT_EQ(json::parse(body_of(ok))["choices"][0]["text"], oracle().expected_text("hello world", 5)) << ok;
  // A long request on the idle connection takes the one slot: HTTP is turned away with 429.
  WireRequest longr = request("long", "the stone", 4000);
  longr.keep_alive = true;
  ASSERT_TRUE(idle->send_request(longr).ok());
  WireEvent ev;
  ASSERT_TRUE(idle->read_event(&ev, kHangGuardMs).ok())
      << "timed out waiting for the long request's first token";
  ASSERT_EQ(ev.kind, WireEvent::Kind::kToken);
  const std::string busy = http_completion(5);
  EXPECT_EQ(status_of(busy), 429) << busy;
  EXPECT_NE(busy.find("too_many_sessions"), std::string::npos) << busy;
  m = metrics(d);
  EXPECT_EQ(m["sessions_open"], 1);
  EXPECT_EQ(m["http_sessions_open"], 0);
  EXPECT_EQ(m["rejected_total"]["session_cap"], 1);
  // Cancelled, it frees the slot for HTTP.
  ASSERT_TRUE(idle->send_cancel("long").ok());
  m = wait_metrics_json(d, [](const json& j) { return j["sessions_open"] == 0 && j["active_sessions"] == 0; });
  EXPECT_EQ(m["sessions_open"], 0) << "timed out waiting for the cancel to free the slot";
  EXPECT_EQ(status_of(http_completion(5)), 200);
  EXPECT_EQ(metrics(d)["http_sessions_open"], 0);
}

// Requests past --max-sessions wait in line, as llama-server's do past its slots: with both
// sessions held, three HTTP requests wait (the gauge says so), nothing is refused, and once the
// held streams go every one is served exactly.
TEST(UmadAdmission, RequestsPastTheSessionsWaitInLineAndAreServed) {
  Daemon d(http_args({"--max-sessions", "2", "--n-ctx", "65536"}));
  ASSERT_TRUE(d.started()) << d.log();
  const int port = http_port(d);
  ASSERT_GT(port, 0) << d.log();
  auto held1 = std::make_unique<HeldStream>(port, "", "hello world");
  auto held2 = std::make_unique<HeldStream>(port, "", "one two three");
  ASSERT_TRUE(eventually([&] { return held1->tokens() > 0 && held2->tokens() > 0; }, "both held streams streaming"));
  const std::vector<std::string> prompts = {"count 1", "count 2", "count 3"};
  std::vector<std::string> got(prompts.size());
  std::vector<std::thread> clients;
  for (std::size_t k = 0; k < prompts.size(); ++k) {
    clients.emplace_back([&, k] {
      Tcp t(port);
      EXPECT_TRUE(t.send(post("/v1/completions", R"({"model":"m","prompt":")" + prompts[k] + R"(","max_tokens":6})", false)));
      got[k] = t.response();
    });
  }
  json m = wait_metrics_json(d, [](const json& j) { return j["sessions_waiting"] == 3; });
  EXPECT_EQ(m["sessions_waiting"], 3) << "timed out waiting for three requests in line";
  EXPECT_EQ(m["rejected_total"]["session_cap"], 0);
  held1->close();
  held2->close();
  for (auto& t : clients) t.join();
  for (std::size_t k = 0; k < prompts.size(); ++k) {
    ASSERT_EQ(status_of(got[k]), 200) << got[k];
    EXPECT_EQ(json::parse(body_of(got[k]))["choices"][0]["text"], oracle().expected_text(prompts[k], 6)) << got[k];
  }
  m = metrics(d);
  EXPECT_EQ(m["sessions_waiting"], 0);
  EXPECT_EQ(m["rejected_total"]["session_cap"], 0);
}

}  // namespace
}  // namespace uma::test
