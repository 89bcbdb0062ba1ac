// The cluster's data path with real processes: a redis-server, umad agents on the oracle
// model and uma-gw gateways. Exact outputs through a gateway (raw HTTP and the OpenAI Node SDK),
// failover (a killed agent, a hung one, a request that fails before its first byte, an agent dying
// mid-stream: resumed exactly), two gateways sending a shared prefix to the agent that holds
// it, and clients that leave while their prompts are tokenized. Under load (Redis down 30 s, a full
// cluster, 100 concurrent requests): cluster_load_test.cc. Times are printed, never asserted: which
// mechanism took an agent out of routing is read from the gateway's log (timing targets live in
// bench/cluster.sh).
#include <gtest/gtest.h>

#include <iostream>
#include <signal.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "publish/agent_heartbeat.h"
#include "cluster/agent_state.h"
#include "cluster/redis_client.h"
#include "e2e/cluster_harness.h"
#include "e2e/http_client.h"
#include "e2e/openai_sdk_run.h"
#include "e2e/oracle.h"

namespace uma::test {
namespace {

using json = nlohmann::json;

// The streamed text of one SSE completion body (chunked), "ERROR ..." at an error event.
std::string stream_text(const std::string& sse) {
  std::string text;
  for (std::size_t at = sse.find("data: "); at != std::string::npos; at = sse.find("data: ", at + 1)) {
    const std::size_t end = sse.find("\n\n", at);
    if (end == std::string::npos) break;
    const std::string data = sse.substr(at + 6, end - at - 6);
    if (data == "[DONE]") break;
    const json j = json::parse(data, nullptr, false);
    if (j.is_discarded()) continue;
    if (j.contains("error")) return "ERROR " + data;
    if (!j["choices"].empty()) text += j["choices"][0].value("text", "");
  }
  return text;
}

std::size_t data_events(const std::string& b) {
  std::size_t n = 0;
  for (std::size_t at = b.find("data: "); at != std::string::npos; at = b.find("data: ", at + 1)) ++n;
  return n;
}

// The agent with a completion in flight (its HTTP sessions gauge), or -1.
int busy_agent(const LocalCluster& c) {
  for (std::size_t i = 0; i < c.agents.size(); ++i) {
    const std::string page = body_of(http_get(c.agent_port(i), "/metrics"));
    if (prometheus_value(page, "uma_sessions_open{front_end=\"http\"}") >= 1) return static_cast<int>(i);
  }
  return -1;
}

TEST(ClusterGateway, ExactOutputsThroughEitherGatewayAndTheNodeSdk) {
  LocalCluster c;
  ASSERT_TRUE(c.up(3, 2)) << (c.gateways.empty() ? "" : c.gateways[0]->log());
  for (const auto& g : c.gateways) {
    EXPECT_EQ(complete(g->port(), "the river", 12), oracle().expected_text("the river", 12));
    Tcp t(g->port());
    ASSERT_TRUE(t.send(post("/v1/completions", json({{"prompt", "the stone"}, {"max_tokens", 9}, {"stream", true}}).dump())));
    const std::string r = t.response();
    EXPECT_EQ(status_of(r), 200) << r;
    EXPECT_EQ(stream_text(dechunk(body_of(r))), oracle().expected_text("the stone", 9));
    EXPECT_EQ(dechunk(body_of(r)).find(": tokens"), std::string::npos) << "umad's token comments stay in the gateway";
  }
  // Checked by the gateway as umad checks it: an OpenAI field umad cannot honour is a 400 naming
  // it, and `uma` is the gateway's own.
  Tcp bad(c.gateways[0]->port());
  ASSERT_TRUE(bad.send(post("/v1/completions", R"({"prompt":"x","echo":true})")));
  std::string r = bad.response();
  EXPECT_EQ(status_of(r), 400);
  EXPECT_EQ(json::parse(body_of(r))["error"]["param"], "echo");
  // A model no agent serves (and no catalog holds): 404 naming it, never sent to an agent.
  ASSERT_TRUE(bad.send(post("/v1/completions", R"({"prompt":"x","model":"no-such-model"})")));
  r = bad.response();
  EXPECT_EQ(status_of(r), 404) << r;
  EXPECT_EQ(json::parse(body_of(r))["error"]["param"], "model");
  ASSERT_TRUE(bad.send(post("/v1/completions", R"({"prompt":"x","uma":{"resume":[1]}})")));
  r = bad.response();
  EXPECT_EQ(status_of(r), 400);
  EXPECT_EQ(json::parse(body_of(r))["error"]["param"], "uma");

  std::string out;
  EXPECT_EQ(run_openai_sdk_test(c.gateways[1]->url() + "/v1", &out), 0) << out;
  EXPECT_NE(out.find("all checks passed"), std::string::npos) << out;
  // Ollama's API through the gateway: chat and generate re-encoded from the agents' streams.
  out.clear();
  EXPECT_EQ(run_ollama_client_test(c.gateways[0]->url(), "oracle", &out, /*through_gateway=*/true), 0) << out;
  EXPECT_NE(out.find("ollama client: all passed"), std::string::npos) << out;
  // The web page on the gateway: a chat through it, and the gateway's own status.
  if (!webui_test_available()) {
    std::cout << "(no puppeteer-core or chromium here: the gateway's page is not driven)\n";
    return;
  }
  std::vector<std::string> agents;
  for (std::size_t i = 0; i < c.agents.size(); ++i) agents.push_back("http://127.0.0.1:" + std::to_string(c.agent_port(i)));
  out.clear();
  EXPECT_EQ(run_webui_test(c.gateways[0]->url(), "", temp_dir(), &out, agents), 0) << out;
  EXPECT_NE(out.find("webui: all passed"), std::string::npos) << out;
}

// The gateway tokenizes each prompt to route it; the agent runs those tokens (uma.prompt_tokens)
// instead of tokenizing again. They are the agent's own: the same prompt count and the same exact
// output through the gateway as straight to the agent, for chat (rendered with the model's
// template on both sides) and completions; only the gateway's requests skip the agent's tokenizer.
TEST(ClusterGateway, AgentsRunTheGatewaysTokensWhichAreTheirOwn) {
  LocalCluster c;
  ASSERT_TRUE(c.up(1, 1)) << (c.gateways.empty() ? "" : c.gateways[0]->log());
  const auto ask = [](int port, const std::string& path, const json& body) {
    Tcp t(port);
    EXPECT_TRUE(t.send(post(path, body.dump())));
    const std::string r = t.response();
    EXPECT_EQ(status_of(r), 200) << r;
    return json::parse(body_of(r), nullptr, false);
  };
  const std::vector<std::pair<std::string, json>> requests = {
      {"/v1/chat/completions", {{"messages", {{{"role", "system"}, {"content", "be brief"}}, {{"role", "user"}, {"content", "hello world"}}}},
                                {"max_tokens", 10}}},
      {"/v1/completions", {{"prompt", "the river and the stone"}, {"max_tokens", 10}}},
  };
  const int agent = c.agent_port(0);
  const double before = prometheus_value(body_of(http_get(agent, "/metrics")), "uma_gateway_tokens_total");
  for (const auto& [path, body] : requests) {
    const json via = ask(c.gateways[0]->port(), path, body), direct = ask(agent, path, body);
    ASSERT_TRUE(via.is_object() && direct.is_object()) << path;
    EXPECT_GT(direct["usage"]["prompt_tokens"].get<int>(), 3) << path;
    EXPECT_EQ(via["usage"]["prompt_tokens"], direct["usage"]["prompt_tokens"]) << path;
    EXPECT_EQ(via["choices"][0], direct["choices"][0]) << path;
  }
  EXPECT_EQ(prometheus_value(body_of(http_get(agent, "/metrics")), "uma_gateway_tokens_total") - before, 2.0);
}

// The gateway's log line saying agent `id` went out of routing, the first past byte `from` ("" if none).
std::string out_of_routing(const Gateway& g, const std::string& id, std::size_t from) {
  const std::string log = g.log();
  const std::size_t down = log.find("agent " + id + ": event stream down (", from), gone = log.find("agent " + id + ": gone from the cluster view", from);
  if (down == std::string::npos && gone == std::string::npos) return "";
  if (down < gone) return log.substr(down, log.find('\n', down) - down);
  return log.substr(gone, log.find('\n', gone) - gone);
}

TEST(ClusterGateway, AKilledAgentIsDroppedAtOnceAndItsStreamResumesExactlyElsewhere) {
  LocalCluster c;
  // A stream far longer than the test's steps (the test leaves once it has seen enough of it).
  const int n = 12000;
  ASSERT_TRUE(c.up(3, 1, {"--n-ctx", "16384"})) << (c.gateways.empty() ? "" : c.gateways[0]->log());
  const Gateway& g = *c.gateways[0];
  const std::string prompt = "the river";
  ASSERT_EQ(oracle().expected_pieces(prompt, n).size(), static_cast<std::size_t>(n)) << "the oracle's continuation ends early";
  Tcp t(g.port());
  ASSERT_TRUE(t.send(post("/v1/completions", json({{"prompt", prompt}, {"max_tokens", n}, {"stream", true}}).dump())));
  t.read_until([](const std::string& b) { return data_events(b) >= 60; });
  const int victim = busy_agent(c);
  ASSERT_GE(victim, 0) << "no agent with the stream in flight";
  ASSERT_EQ(response_length(t.buffered()), std::string::npos) << "the stream is in flight when its agent is killed";
  const std::size_t log_at = g.log().size();
  // Reads what came, while the test waits (a client that stops reading is dropped, not resumed).
  const auto reading = [&] { t.closed_by_peer(std::chrono::milliseconds(20)); };
  ::kill(c.agents[static_cast<std::size_t>(victim)]->pid(), SIGKILL);
  const auto killed = std::chrono::steady_clock::now();
  ASSERT_TRUE(eventually([&] { reading(); return live_agents(g) == 2; }, "the killed agent out of routing")) << g.log();
  std::printf("killed agent out of routing after %lld ms\n", static_cast<long long>(
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - killed).count()));
  // Its stream's break says so, before its heartbeat's key could expire (3 s) take it from the view.
  const std::string why = out_of_routing(g, "127.0.0.1:" + std::to_string(c.agent_port(static_cast<std::size_t>(victim))), log_at);
  EXPECT_NE(why.find("event stream down"), std::string::npos) << why << "\n" << g.log();
  EXPECT_EQ(why.find("silent"), std::string::npos) << why;
  // The stream goes on elsewhere, exact across the resume.
  ASSERT_TRUE(eventually([&] { reading(); return gw_metric(g, "uma_gw_resumes_total") == 1; }, "the stream resumed mid-stream")) << g.log();
  const std::size_t at = data_events(t.buffered());
  const std::string r = t.read_until([&](const std::string& b) { return data_events(b) >= at + 100; });
  const std::string text = stream_text(dechunk(body_of(r)));
  EXPECT_GE(data_events(r), at + 100) << "tokens after the resume";
  EXPECT_EQ(text, oracle().expected_text(prompt, n).substr(0, text.size())) << g.log();
  t.close();
  EXPECT_EQ(gw_metric(g, "uma_gw_resumes_total"), 1);
  // Nothing new goes to it: no request needs a retry.
  for (int i = 0; i < 6; ++i) EXPECT_EQ(complete(g.port(), "hello world", 8), oracle().expected_text("hello world", 8));
  EXPECT_EQ(gw_metric(g, "uma_gw_retries_total"), 0);
}

// A stopped process's sockets stay open: what says it hangs is its event stream falling silent
// (pings every 500 ms; silent for 2 s: out of routing), or, later, its key's TTL.
TEST(ClusterGateway, AHungAgentIsDroppedWhenItsBeatStopsAndNothingIsSentToIt) {
  LocalCluster c;
  ASSERT_TRUE(c.up(3, 1)) << (c.gateways.empty() ? "" : c.gateways[0]->log());
  const Gateway& g = *c.gateways[0];
  const pid_t hung = c.agents[1]->pid();
  const std::size_t log_at = g.log().size();
  ::kill(hung, SIGSTOP);
  const auto detected = wait_for([&] { return live_agents(g) == 2; });
  ::kill(hung, SIGCONT);  // (after the measurement: the agent comes back as a fresh stream)
  ASSERT_TRUE(detected.has_value()) << "timed out waiting for the hung agent to leave routing\n" << g.log();
  std::printf("hung agent out of routing after %lld ms\n", static_cast<long long>(detected->count()));
  const std::string why = out_of_routing(g, "127.0.0.1:" + std::to_string(c.agent_port(1)), log_at);
  EXPECT_NE(why.find("silent: the agent hangs"), std::string::npos) << "its stream stays open: only its silence can say\n" << why
                                                                     << "\n" << g.log();
  ::kill(hung, SIGSTOP);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(complete(g.port(), "hello world", 8), oracle().expected_text("hello world", 8));
  ::kill(hung, SIGCONT);
  EXPECT_EQ(gw_metric(g, "uma_gw_retries_total"), 0);
}

TEST(ClusterGateway, ARequestThatFailsBeforeItsFirstByteIsRetriedOnTheNextAgent) {
  LocalCluster c;
  ASSERT_TRUE(c.up(2, 1)) << (c.gateways.empty() ? "" : c.gateways[0]->log());
  const Gateway& g = *c.gateways[0];
  // An agent that died a moment ago: still in Redis, its address refusing connections. It claims
  // to be the fastest, so the gateway picks it first. (Its event stream is a live agent's.)
  cluster::RedisClient redis({"127.0.0.1", c.redis.port()}, kHangGuard);
  cluster::RedisReply reply;
  ASSERT_TRUE(redis.command({"GET", cluster::agent_key("127.0.0.1:" + std::to_string(c.agent_port(0)))}, &reply).ok());
  cluster::AgentState ghost;
  ASSERT_TRUE(cluster::decode_agent_state(reply.str, &ghost).ok());
  ghost.id = "ghost";
  ghost.address = "http://127.0.0.1:" + std::to_string(free_loopback_port());
  ghost.prefill_tok_s = 1e9;
  // It beats as an agent does (a view takes fresh states only) until the gateway routes to it; its
  // link stays while its stream talks.
  const auto beat = [&] {
    ghost.ts_ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
    return redis.command({"SET", cluster::agent_key("ghost"), cluster::encode_agent_state(ghost), "PX", "3000"}, &reply).ok() &&
           redis.command({"SADD", cluster::kAgentsSet, "ghost"}, &reply).ok();
  };
  ASSERT_TRUE(eventually([&] { return beat() && live_agents(g) == 3; }, "the ghost live in the gateway's view")) << g.log();
  EXPECT_EQ(complete(g.port(), "hello world", 8), oracle().expected_text("hello world", 8)) << g.log();
  EXPECT_EQ(gw_metric(g, "uma_gw_retries_total"), 1);
  Tcp t(g.port());
  ASSERT_TRUE(t.send(post("/v1/completions", json({{"prompt", "the stone"}, {"max_tokens", 9}, {"stream", true}}).dump())));
  EXPECT_EQ(stream_text(dechunk(body_of(t.response()))), oracle().expected_text("the stone", 9));
  EXPECT_EQ(gw_metric(g, "uma_gw_retries_total"), 2);
}

TEST(ClusterGateway, TwoGatewaysSendASharedPrefixToTheAgentHoldingIt) {
  LocalCluster c;
  ASSERT_TRUE(c.up(3, 2)) << (c.gateways.empty() ? "" : c.gateways[0]->log());
  // Long enough that the agent keeps its KV after it finishes (over 256 tokens).
  const std::string prefix = Oracle::long_prompt(300, "shared");
  EXPECT_EQ(complete(c.gateways[0]->port(), prefix, 4), oracle().expected_text(prefix, 4));
  std::vector<double> hits_before;
  for (std::size_t i = 0; i < c.agents.size(); ++i) {
    hits_before.push_back(prometheus_value(body_of(http_get(c.agent_port(i), "/metrics")), "uma_prefix_cache_hit_tokens_total"));
  }
  // Both gateways hear from the agent's stream that it holds the prefix's blocks.
  const auto holds = [](const Gateway& g) {
    for (double blocks : gw_series(g, "uma_gw_agent_blocks")) {
      if (blocks >= 9) return true;
    }
    return false;
  };
  ASSERT_TRUE(eventually([&] { return holds(*c.gateways[0]) && holds(*c.gateways[1]); }, "both gateways hearing of the prefix's blocks"));
  // Each request goes when its gateway counts no agent busy: the holder's last request, still
  // counted until its load report, would be a wait (and on a busy machine a longer one) that the
  // prefix's saving need not beat. What is compared is where the prefix is, at equal load.
  const auto idle = [](const Gateway& g) {
    const std::vector<double> sessions = gw_series(g, "uma_gw_agent_sessions");
    return !sessions.empty() && std::all_of(sessions.begin(), sessions.end(), [](double s) { return s == 0; });
  };
  for (int i = 0; i < 6; ++i) {
    const Gateway& g = *c.gateways[static_cast<std::size_t>(i % 2)];
    ASSERT_TRUE(eventually([&] { return idle(g); }, "no agent busy in the gateway's view")) << g.log();
    const std::string prompt = prefix + " turn" + std::to_string(i);
    EXPECT_EQ(complete(g.port(), prompt, 4), oracle().expected_text(prompt, 4));
  }
  // Every one of them reused the prefix on the one agent that held it.
  int reused_on = -1;
  for (std::size_t i = 0; i < c.agents.size(); ++i) {
    const double hits = prometheus_value(body_of(http_get(c.agent_port(i), "/metrics")), "uma_prefix_cache_hit_tokens_total");
    if (hits > hits_before[i]) {
      EXPECT_EQ(reused_on, -1) << "prefix hits on two agents";
      reused_on = static_cast<int>(i);
      EXPECT_GE(hits - hits_before[i], 6 * 288) << "each of the 6 reused at least 9 blocks";
    }
  }
  EXPECT_GE(reused_on, 0);
}

// Prompts are tokenized off the gateway's I/O thread: a client that leaves meanwhile (skipped) or
// just after its request went out must cost nothing: no crash, no agent session left held, and the
// next request is served exactly.
TEST(ClusterGateway, ClientsThatLeaveWhileTheirPromptsAreTokenizedLeaveNothingBehind) {
  LocalCluster c;
  ASSERT_TRUE(c.up(2, 1)) << (c.gateways.empty() ? "" : c.gateways[0]->log());
  const Gateway& g = *c.gateways[0];
  // Long enough (tens of ms each to tokenize) that most are still queued for a tokenizer thread
  // when their client's hang-up is read: those are skipped, not tokenized.
  // The longest prompt under the 64 KiB prompt cap.
  int words = 12000;
  while (Oracle::long_prompt(words, "gone").size() > 60000) words -= 500;
  const std::string body = json({{"prompt", Oracle::long_prompt(words, "gone")}, {"max_tokens", 64}}).dump();
  for (int k = 0; k < 40; ++k) {
    Tcp t(g.port());
    ASSERT_TRUE(t.send(post("/v1/completions", body)));
  }  // closed at once
  const std::string expected = oracle().expected_text("hello world", 8);
  EXPECT_EQ(complete(g.port(), "hello world", 8), expected);
  const auto nothing_held = [&] {
    double in_use = 0;
    for (double s : gw_series(g, "uma_gw_agent_sessions")) in_use += s;
    for (std::size_t i = 0; i < c.agents.size(); ++i) {
      in_use += prometheus_value(body_of(http_get(c.agent_port(i), "/metrics")), "uma_sessions_open{front_end=\"http\"}");
    }
    return in_use == 0;
  };
  EXPECT_TRUE(eventually(nothing_held, "no session held by the clients that left")) << g.log();
  EXPECT_EQ(complete(g.port(), "hello world", 8), expected);
  std::printf("%.0f of 40 skipped at their tokenizer\n", gw_metric(g, "uma_gw_abandoned_total"));
  EXPECT_GE(gw_metric(g, "uma_gw_abandoned_total"), 1) << "no request was skipped: the test did not reach its case\n"
                                                        << body_of(http_get(g.port(), "/metrics"));
}

}  // namespace
}  // namespace uma::test
