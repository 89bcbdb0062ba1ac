// End to end over HTTP: the official OpenAI Node SDK drives completions and chat (streamed and
// not, usage, stop, errors) against the oracle model's known outputs; raw sockets check what an
// SDK never sends (malformed requests, oversize bodies, keep-alive, timeouts, disconnects).
#include <gtest/gtest.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <fstream>
#include <mutex>
#include <thread>

#include "e2e/daemon_harness.h"
#include "e2e/http_client.h"
#include "e2e/json_helpers.h"
#include "e2e/openai_sdk_run.h"
#include "e2e/redis_harness.h"
#include "e2e/oracle.h"
#include "llama.h"

namespace uma::test {
namespace {

using namespace std::chrono_literals;

TEST(UmadHttp, TheOpenAiNodeSdkGetsExactCompletionsAndChat) {
  Daemon d(http_args({}));  // no --max-tokens cap: max_tokens beyond the context is the 400
  ASSERT_TRUE(d.started()) << d.log();
  const int port = http_port(d);
  ASSERT_GT(port, 0) << d.log();
  std::string out;
  EXPECT_EQ(run_openai_sdk_test("http://127.0.0.1:" + std::to_string(port) + "/v1", &out), 0) << out;
  EXPECT_NE(out.find("all checks passed"), std::string::npos) << out;
}

TEST(UmadHttp, TheOpenAiNodeSdkCallsToolsThroughTheModelsTemplate) {
  Daemon d(args({"--http", "127.0.0.1:0"}), "oracle-qwen25-template.gguf");
  ASSERT_TRUE(d.started()) << d.log();
  std::string out;
  const int rc = run_command({"/usr/bin/env", "NODE_PATH=" UMA_NODE_MODULES, "node",
                              UMA_SOURCE_DIR "/tests/http/openai_sdk_tools_test.js",
                              "http://127.0.0.1:" + std::to_string(http_port(d)) + "/v1"}, &out,
                             static_cast<int>(2 * kHangGuard.count()));  // each request's own bound is the guard
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("all checks passed"), std::string::npos) << out;
}

TEST(UmadHttp, ChoicesForkThePromptsKvAndEachIsExact) {
  Daemon d(http_args({"--n-ctx", "8192", "--max-sessions", "8"}));
  ASSERT_TRUE(d.started()) << d.log();
  const std::string prompt = Oracle::long_prompt(300, "choices");
  const std::size_t prompt_tokens = oracle().tokenize(prompt).size();
  const int n = 4, tokens = 10;
  Tcp t(http_port(d));
  nlohmann::json body = {{"prompt", prompt}, {"max_tokens", tokens}, {"n", n}};
  ASSERT_TRUE(t.send(post("/v1/completions", body.dump())));
  const std::string r = t.response();
  ASSERT_EQ(status_of(r), 200) << r;
  const nlohmann::json j = nlohmann::json::parse(body_of(r));
  ASSERT_EQ(j["choices"].size(), static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(j["choices"][i]["index"], i);
    EXPECT_EQ(j["choices"][i]["text"], oracle().expected_text(prompt, tokens)) << "choice " << i;
  }
  EXPECT_EQ(j["usage"]["prompt_tokens"], prompt_tokens);
  EXPECT_EQ(j["usage"]["completion_tokens"], n * tokens);
  // One choice prefilled the prompt; the others shared its KV (all but the last partial block).
  const nlohmann::json m = metrics(d)["prefix_cache"];
  EXPECT_EQ(m["hits_total"], n - 1) << m.dump();
  EXPECT_GE(m["reused_tokens_total"].get<double>(), static_cast<double>((n - 1) * (prompt_tokens - 32))) << m.dump();
  // More choices than there are sessions: a 400 naming n (never satisfiable, so not a 429).
  ASSERT_TRUE(t.send(post("/v1/completions", nlohmann::json({{"prompt", "x"}, {"n", 9}}).dump())));
  const std::string too_many = t.response();
  EXPECT_EQ(status_of(too_many), 400) << too_many;
  EXPECT_EQ(nlohmann::json::parse(body_of(too_many))["error"]["param"], "n");
}

TEST(UmadHttp, HealthModelsMetricsAndKeepAlive) {
  Daemon d(http_args({}));
  ASSERT_TRUE(d.started()) << d.log();
  Tcp t(http_port(d));
  ASSERT_TRUE(t.send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n"));
  std::string r = t.response();
  EXPECT_EQ(status_of(r), 200) << r;
  ASSERT_TRUE(t.send("GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"));  // same connection
  r = t.response();
  EXPECT_EQ(status_of(r), 200) << r;
  EXPECT_EQ(nlohmann::json::parse(body_of(r))["data"][0]["id"], "oracle.gguf");
  ASSERT_TRUE(t.send("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"));
  r = t.response();
  EXPECT_NE(r.find("uma_time_to_first_token_seconds_bucket"), std::string::npos) << r;
  ASSERT_TRUE(t.send("GET /nope HTTP/1.1\r\nHost: x\r\n\r\n"));
  EXPECT_EQ(status_of(t.response()), 404);
}

TEST(UmadHttp, MalformedRequestsAndOversizeBodiesGetTypedErrors) {
  Daemon d(http_args({"--http-max-body-kib", "4"}));
  ASSERT_TRUE(d.started()) << d.log();
  const int port = http_port(d);
  {
    Tcp t(port);
    ASSERT_TRUE(t.send("THIS IS NOT HTTP\r\n\r\n"));
    const std::string r = t.response();
    EXPECT_EQ(status_of(r), 400) << r;
    EXPECT_TRUE(t.closed_by_peer(kHangGuard)) << "timed out waiting for the server to close";
  }
  {
    Tcp t(port);
    ASSERT_TRUE(t.send(post("/v1/completions", R"({"prompt":")" + std::string(8000, 'a') + R"("})")));
    const std::string r = t.response();
    EXPECT_EQ(status_of(r), 413) << r;
    EXPECT_EQ(nlohmann::json::parse(body_of(r))["error"]["type"], "invalid_request_error");
  }
  {
    Tcp t(port);
    ASSERT_TRUE(t.send(post("/v1/completions", "{not json")));
    const std::string r = t.response();
    EXPECT_EQ(status_of(r), 400) << r;
    EXPECT_NE(body_of(r).find("not valid JSON"), std::string::npos) << r;
  }
  {
    Tcp t(port);  // no chat template problem here: chatml given; a bad message is a 400
    ASSERT_TRUE(t.send(post("/v1/chat/completions", R"({"messages":[{"content":"x"}]})")));
    EXPECT_EQ(status_of(t.response()), 400);
  }
  // The daemon still serves.
  Tcp t(port);
  ASSERT_TRUE(t.send(post("/v1/completions", R"({"prompt":"hello world","max_tokens":5,"temperature":0})")));
  const std::string r = t.response();
  ASSERT_EQ(status_of(r), 200) << r;
  EXPECT_EQ(nlohmann::json::parse(body_of(r))["choices"][0]["text"], oracle().expected_text("hello world", 5));
}

TEST(UmadHttp, HealthSays503WhileTheModelLoadsThen200) {
  // The harness returns once the model is loaded, so a poller on a port chosen beforehand watches
  // from before the start; the load is slowed down by a test-only flag.
  const int port = free_loopback_port();
  ASSERT_GT(port, 0);
  std::mutex mu;
  std::condition_variable ready;
  bool stop = false;
  std::vector<int> seen;  // under mu
  std::string loading_body;
  std::thread poller([&] {
    for (;;) {
      {
        std::lock_guard<std::mutex> lock(mu);
        if (stop) return;
      }
      Tcp t(port);
      if (t.send("GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")) {
        const std::string r = t.response();
        std::lock_guard<std::mutex> lock(mu);
        if (status_of(r) > 0) seen.push_back(status_of(r));
        if (status_of(r) == 503) loading_body = body_of(r);
        if (status_of(r) == 200) ready.notify_all();
      }
      std::this_thread::sleep_for(20ms);  // the polling interval, not a synchronisation
    }
  });
  Daemon d(args({"--http", "127.0.0.1:" + std::to_string(port), "--test-load-delay-ms", "1500"}));
  {
    // Until the poller has seen the loaded daemon answer 200 (or the hang guard: then the checks
    // below fail).
    std::unique_lock<std::mutex> lock(mu);
    ready.wait_for(lock, kHangGuard, [&] { return !seen.empty() && seen.back() == 200; });
    stop = true;
  }
  poller.join();
  ASSERT_TRUE(d.started()) << d.log();
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen.front(), 503) << "while loading";
  EXPECT_NE(loading_body.find("loading"), std::string::npos) << loading_body;
  EXPECT_EQ(seen.back(), 200) << "once ready";
  Tcp t(port);
  ASSERT_TRUE(t.send(post("/v1/completions", R"({"prompt":"hello world","max_tokens":5,"temperature":0})")));
  EXPECT_EQ(nlohmann::json::parse(body_of(t.response()))["choices"][0]["text"], oracle().expected_text("hello world", 5));
}

// A model that ships its own chat template (Qwen 2.5's, stored in the GGUF by uma-mkmodel
// --chat-template-file, scripts/make_test_models.sh) is rendered with it: the oracle's
// continuation of exactly that prompt comes back.
TEST(UmadHttp, TheModelsOwnChatTemplateRendersChat) {
  Daemon d(args({"--http", "127.0.0.1:0"}), "oracle-qwen25-template.gguf");
  ASSERT_TRUE(d.started()) << d.log();
  const std::string rendered =
      "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n";
  const int n = 8;
  Tcp t(http_port(d));
  ASSERT_TRUE(t.send(post("/v1/chat/completions",
                          R"({"max_tokens":8,"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"}]})")));
  const std::string r = t.response();
  ASSERT_EQ(status_of(r), 200) << r;
  const nlohmann::json j = nlohmann::json::parse(body_of(r));
  EXPECT_EQ(j["choices"][0]["message"]["content"], oracle().expected_text(rendered, n));
  EXPECT_EQ(j["usage"]["prompt_tokens"], oracle().tokenize(rendered).size());
}

// A body over 4 KiB is parsed and its chat rendered on the prepare stage's thread, not the I/O
// thread: the same exact answer, and the counter says where it ran; a small one stays inline.
TEST(UmadHttp, ALargeChatIsRenderedOffTheIoThreadAndAnsweredExactly) {
  Daemon d(args({"--http", "127.0.0.1:0", "--n-ctx", "8192"}), "oracle-qwen25-template.gguf");
  ASSERT_TRUE(d.started()) << d.log();
  const std::string system = Oracle::long_prompt(1000, "offload");
  ASSERT_GT(system.size(), 4096u);
  const nlohmann::json body = {{"max_tokens", 8},
                               {"messages", {{{"role", "system"}, {"content", system}}, {{"role", "user"}, {"content", "Hi"}}}}};
  const std::string rendered = "<|im_start|>system\n" + system +
                               "<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n";
  Tcp t(http_port(d));
  ASSERT_TRUE(t.send(post("/v1/chat/completions", body.dump())));
  std::string r = t.response();
  ASSERT_EQ(status_of(r), 200) << r;
  nlohmann::json j = nlohmann::json::parse(body_of(r));
  EXPECT_EQ(j["choices"][0]["message"]["content"], oracle().expected_text(rendered, 8));
  EXPECT_EQ(j["usage"]["prompt_tokens"], oracle().tokenize(rendered).size());
  EXPECT_EQ(metrics(d)["inputs_prepared_off_io_total"], 1);
  // A malformed large body: its error comes back the same way, and the connection serves on.
  ASSERT_TRUE(t.send(post("/v1/chat/completions", "{\"messages\": [" + std::string(5000, ' ') + "}")));
  r = t.response();
  EXPECT_EQ(status_of(r), 400) << r;
  ASSERT_TRUE(t.send(post("/v1/completions", R"({"prompt":"hello world","max_tokens":5,"temperature":0})")));
  r = t.response();
  ASSERT_EQ(status_of(r), 200) << r;
  EXPECT_EQ(nlohmann::json::parse(body_of(r))["choices"][0]["text"], oracle().expected_text("hello world", 5));
  EXPECT_EQ(metrics(d)["inputs_prepared_off_io_total"], 2) << "the small one ran inline";
}

TEST(UmadHttp, ChatWithoutATemplateFallsBackToChatmlAndSaysSo) {
  Daemon d(args({"--http", "127.0.0.1:0"}));  // the oracle model has no chat template
  ASSERT_TRUE(d.started()) << d.log();
  EXPECT_NE(d.log().find("chat uses chatml"), std::string::npos) << d.log();
  Tcp t(http_port(d));
  ASSERT_TRUE(t.send(post("/v1/chat/completions", R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":6})")));
  const std::string r = t.response();
  ASSERT_EQ(status_of(r), 200) << r;
  const llama_chat_message m{"user", "hi"};
  std::string prompt(4096, '\0');
  prompt.resize(static_cast<std::size_t>(std::max(0, llama_chat_apply_template("chatml", &m, 1, true, prompt.data(), 4096))));
  EXPECT_EQ(nlohmann::json::parse(body_of(r))["choices"][0]["message"]["content"], oracle().expected_text(prompt, 6));
}

TEST(UmadHttp, IdleConnectionsTimeOutAndDisconnectCancelsTheStream) {
  Daemon d(http_args({"--http-timeout-sec", "1", "--max-tokens", "8000", "--n-ctx", "8192"}));
  ASSERT_TRUE(d.started()) << d.log();
  const int port = http_port(d);
  {
    Tcp idle(port);
    EXPECT_TRUE(idle.closed_by_peer(kHangGuard)) << "an idle connection is closed after --http-timeout-sec";
  }
  {
    Tcp t(port);
    // 8000 tokens: the disconnect lands long before the end, however slow the machine.
    ASSERT_TRUE(t.send(post("/v1/completions", R"({"prompt":"hello world","max_tokens":8000,"stream":true})")));
    const std::string head = t.read_until([](const std::string& b) { return b.find("data: ") != std::string::npos; });
    EXPECT_NE(head.find("text/event-stream"), std::string::npos) << head;
    t.close();
  }
  nlohmann::json m;
  EXPECT_TRUE(eventually([&] {
    m = metrics(d);
    return m["requests_cancelled_total"] == 1 && m["active_sessions"] == 0;
  }, "the disconnect to cancel the stream")) << m.dump();
  EXPECT_EQ(m["requests_cancelled_total"], 1) << m.dump();
  EXPECT_EQ(m["active_sessions"], 0);
  EXPECT_LT(m["tokens_generated_total"].get<int>(), 8000);
}

TEST(UmadHttp, ASlowReaderIsDroppedAtTheTxCapAndOthersAreServed) {
  Daemon d(http_args({"--max-tokens", "8000", "--n-ctx", "16384", "--max-tx-kib", "4"}));
  ASSERT_TRUE(d.started()) << d.log();
  const int port = http_port(d);
  Tcp slow(port, /*rcvbuf=*/2048);  // never reads
  ASSERT_TRUE(slow.send(post("/v1/completions", R"({"prompt":"hello world","max_tokens":8000,"stream":true})")));
  nlohmann::json m;
  EXPECT_TRUE(eventually([&] {
    m = metrics(d);
    return m["tx_drops_total"] == 1 && m["active_sessions"] == 0;
  }, "the slow reader to be dropped")) << m.dump();
  EXPECT_EQ(m["tx_drops_total"], 1) << m.dump();
  EXPECT_EQ(m["active_sessions"], 0);
  EXPECT_LT(m["tokens_generated_total"].get<int>(), 8000) << "cancelled, not run to the end";
  Tcp t(port);
  ASSERT_TRUE(t.send(post("/v1/completions", R"({"prompt":"hello world","max_tokens":5,"temperature":0})")));
  EXPECT_EQ(nlohmann::json::parse(body_of(t.response()))["choices"][0]["text"], oracle().expected_text("hello world", 5));
}

}  // namespace
}  // namespace uma::test
