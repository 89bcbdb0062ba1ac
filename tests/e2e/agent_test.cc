// uma-agent end to end: a real redis-server holding the catalog, the real uma-agent running a real
// umad per loaded model (oracle models under several ids, served from the agent's NVMe tier), the
// management API over HTTP. Loads on demand with progress, exact streams on one model while another
// loads and unloads, unloads by keep_alive and for room (least recently used, never one in use),
// a load that cannot fit, a crashed model, and the cluster key. Whatever must be in use while
// something else happens is held in use by the test (HeldStream), never by a stream's speed.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <thread>

#include "cluster/loader_state.h"
#include "cluster/model_catalog.h"
#include "e2e/agent_harness.h"
#include "e2e/cluster_harness.h"
#include "e2e/held_stream.h"
#include "e2e/http_client.h"
#include "e2e/nginx_harness.h"
#include "e2e/openai_sdk_run.h"
#include "e2e/oracle.h"
#include "e2e/redis_harness.h"
#include "httpkit/http_wire.h"

namespace uma::test {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

TEST(Agent, LoadsOnDemandWithProgressAndServesOneModelExactlyWhileAnotherLoadsAndUnloads) {
  Catalog cat;
  ASSERT_TRUE(cat.up({"oracle-a", "oracle-b"}));
  Agent agent(cat.redis.address(), cat.store_dir, {});
  ASSERT_GT(agent.port(), 0) << agent.log();
  EXPECT_EQ(state_of(agent.port(), "oracle-a"), "nvme") << models(agent.port()).dump();
  // The standby umad, started ahead, is what the first load takes.
  const auto metric = [&](const char* name) { return prometheus_value(body_of(http_get(agent.port(), "/metrics")), name); };
  ASSERT_TRUE(eventually([&] { return metric("uma_agent_standby_ready") == 1; }, "a standby umad ready")) << agent.log();

  const std::vector<json> events = load(agent.port(), "oracle-a");
  ASSERT_FALSE(events.empty());
  const json& end = events.back();
  ASSERT_EQ(end.value("state", ""), "loaded") << end.dump() << agent.log();
  EXPECT_EQ(end["tier"], "nvme");
  EXPECT_EQ(end["bytes"], cat.bytes);
  // Progress comes first, through the states in their order.
  const std::vector<std::string> order = {"queued", "filling", "starting", "loaded"};
  std::size_t last = 0;
  for (const json& e : events) {
    const auto at = std::find(order.begin(), order.end(), e.value("state", "?"));
    ASSERT_NE(at, order.end()) << e.dump();
    EXPECT_GE(static_cast<std::size_t>(at - order.begin()), last) << e.dump();
    last = static_cast<std::size_t>(at - order.begin());
  }
  const int a = port_of(end);
  ASSERT_GT(a, 0);
  EXPECT_EQ(complete(a, "hello world", 8), oracle().expected_text("hello world", 8));
  EXPECT_EQ(metric("uma_agent_standby_starts_total"), 1) << "A's umad was the standby";
  // Another is started for the next cold model once A serves.
  ASSERT_TRUE(eventually([&] { return metric("uma_agent_standby_ready") == 1; }, "the next standby ready")) << agent.log();
  // It is told the DRAM tier's image (A's) to pin ahead; only a GPU backend can pin it.
  const auto standby_log = [&] {
    std::ifstream in(agent.run_dir() + "/standby-2.log");
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  EXPECT_TRUE(eventually([&] { return standby_log().find(" of 1 image(s) pinned") != std::string::npos; }, "the pin set"))
      << standby_log();
  json row = model_row(agent.port(), "oracle-a");
  EXPECT_EQ(row["state"], "loaded");
  EXPECT_GT(row["loaded_at"].get<std::int64_t>(), 0);
  EXPECT_EQ(row["keep_alive"], 300000) << "the default keep_alive is Ollama's 5 minutes";
  // A second load of a loaded model answers at once with the same place.
  EXPECT_EQ(port_of(load(agent.port(), "oracle-a").back()), a);

  // A stream on A, held all the while B loads, serves and unloads.
  HeldStream long_a(a, "", "hello world");
  ASSERT_TRUE(eventually([&] { return long_a.tokens() > 0 && model_in_use(agent.port(), "oracle-a"); }, "A's stream under way"))
      << agent.log();
  const json b_loaded = load(agent.port(), "oracle-b", {{"stream", false}}).back();
  ASSERT_EQ(b_loaded.value("state", ""), "loaded") << b_loaded.dump() << agent.log();
  EXPECT_EQ(complete(port_of(b_loaded), "one two three", 12), oracle().expected_text("one two three", 12));
  // Its umad says "idle" once the request's slot is free, which may come after the client has its
  // answer (seen under TSan): an unload asked before that drains (202) instead.
  ASSERT_TRUE(eventually([&] { return !model_in_use(agent.port(), "oracle-b"); }, "B idle after its request"));
  const std::string unloaded = request(agent.port(), "POST", "/unload", R"({"model":"oracle-b"})");
  EXPECT_EQ(status_of(unloaded), 200) << unloaded;
  EXPECT_NE(body_of(unloaded).find("\"unloaded\""), std::string::npos) << unloaded;
  EXPECT_NE(state_of(agent.port(), "oracle-b"), "loaded");
  ASSERT_FALSE(long_a.ended()) << "A's stream outlasts B's whole life";
  long_a.close();
  EXPECT_TRUE(long_a.exact());

  // An unload of a model in use drains: it serves its stream on, and goes once its request ends.
  HeldStream again(a, "", "hello world");
  ASSERT_TRUE(eventually([&] { return again.tokens() > 0 && model_in_use(agent.port(), "oracle-a"); }, "A's next stream under way"));
  const std::string draining = request(agent.port(), "POST", "/unload", R"({"model":"oracle-a"})");
  EXPECT_EQ(status_of(draining), 202) << draining;
  const std::size_t at_unload = again.tokens();
  EXPECT_TRUE(eventually([&] { return again.tokens() >= at_unload + 16; }, "A's stream going on while it drains"));
  EXPECT_EQ(state_of(agent.port(), "oracle-a"), "loaded") << "not gone while its request runs";
  again.close();
  EXPECT_TRUE(again.exact()) << "a draining model serves its stream exactly";
  EXPECT_TRUE(eventually([&] { return model_gone(agent.port(), "oracle-a"); }, "A unloaded once its request ended")) << agent.log();

  // Bad requests are typed errors; an unknown model is a 404.
  EXPECT_EQ(status_of(request(agent.port(), "POST", "/load", R"({"model":"no-such"})")), 200) << "streamed: the error is an event";
  EXPECT_EQ(load(agent.port(), "no-such").back()["error"].value("code", ""), "model_not_found");
  EXPECT_EQ(status_of(request(agent.port(), "POST", "/load", R"({"model":"no-such","stream":false})")), 404);
  EXPECT_EQ(status_of(request(agent.port(), "POST", "/load", R"({"model":"../etc"})")), 400);
  EXPECT_EQ(status_of(request(agent.port(), "POST", "/load", R"({"model":"oracle-a","keep_alive":"soon"})")), 400);
  EXPECT_EQ(status_of(request(agent.port(), "POST", "/load", "not json")), 400);
  EXPECT_EQ(status_of(request(agent.port(), "POST", "/unload", R"({"model":"oracle-b"})")), 404);
  EXPECT_EQ(agent.stop(), 0) << agent.log();
}

TEST(Agent, IdleModelsGoByKeepAliveAndForRoomLeastRecentlyUsedFirstButNeverOneInUse) {
  Catalog cat;
  ASSERT_TRUE(cat.up({"m-a", "m-b", "m-c", "m-d"}));
  // Room for two models.
  const std::string budget_mb = std::to_string((cat.bytes * 5 / 2) >> 20);
  Agent agent(cat.redis.address(), cat.store_dir, {"--models-mb", budget_mb, "--keep-alive", "-1"});
  ASSERT_GT(agent.port(), 0) << agent.log();
  const auto loaded = [&](const std::string& id) { return load(agent.port(), id).back(); };
  const int pa = port_of(loaded("m-a"));
  ASSERT_GT(pa, 0) << agent.log();
  ASSERT_GT(port_of(loaded("m-b")), 0) << agent.log();
  EXPECT_EQ(complete(pa, "hello world", 4), oracle().expected_text("hello world", 4));  // A used after B
  // C takes B's room: B was used least recently.
  ASSERT_GT(port_of(loaded("m-c")), 0) << agent.log();
  EXPECT_EQ(state_of(agent.port(), "m-a"), "loaded");
  EXPECT_NE(state_of(agent.port(), "m-b"), "loaded");
  EXPECT_EQ(state_of(agent.port(), "m-c"), "loaded");
  EXPECT_EQ(prometheus_value(body_of(http_get(agent.port(), "/metrics")), "uma_agent_unloads_total{reason=\"room\"}"), 1);

  // A in use (and used longer ago than C) all the while: D takes C's room, never A's.
  HeldStream long_a(pa, "", "hello world");
  ASSERT_TRUE(eventually([&] { return long_a.tokens() > 0 && model_in_use(agent.port(), "m-a"); }, "A's stream under way"));
  const int pd = port_of(loaded("m-d"));
  ASSERT_GT(pd, 0) << agent.log();
  EXPECT_EQ(state_of(agent.port(), "m-a"), "loaded");
  EXPECT_NE(state_of(agent.port(), "m-c"), "loaded");
  ASSERT_FALSE(long_a.ended()) << "A was in use throughout D's load";
  EXPECT_EQ(prometheus_value(body_of(http_get(agent.port(), "/metrics")), "uma_agent_unload_refusals_total"), 0)
      << "the policy never asked a model in use";

  // keep_alive from the load: D goes once idle that long; A (never) stays. D is given it while in
  // use (an idle D could be gone before its row is read), and goes once its stream ends.
  HeldStream on_d(pd, "", "one two three");
  ASSERT_TRUE(eventually([&] { return on_d.tokens() > 0 && model_in_use(agent.port(), "m-d"); }, "D's stream under way"));
  const json d = load(agent.port(), "m-d", {{"keep_alive", "300ms"}}).back();
  ASSERT_EQ(d.value("state", ""), "loaded");
  EXPECT_EQ(model_row(agent.port(), "m-d")["keep_alive"], 300);
  EXPECT_EQ(state_of(agent.port(), "m-d"), "loaded") << "in use: its keep_alive does not run";
  on_d.close();
  EXPECT_TRUE(on_d.exact());
  ASSERT_TRUE(eventually([&] { return model_gone(agent.port(), "m-d"); }, "D unloaded by its keep_alive")) << agent.log();
  EXPECT_EQ(state_of(agent.port(), "m-a"), "loaded");
  EXPECT_EQ(prometheus_value(body_of(http_get(agent.port(), "/metrics")), "uma_agent_unloads_total{reason=\"keep_alive\"}"), 1);
  long_a.close();
  EXPECT_TRUE(long_a.exact());
  EXPECT_EQ(agent.stop(), 0) << agent.log();
}

TEST(Agent, ALoadThatCannotFitIsRefusedAndACrashedModelCanBeLoadedAgain) {
  Catalog cat;
  ASSERT_TRUE(cat.up({"x-a", "x-b"}));
  const std::string budget_mb = std::to_string((cat.bytes * 3 / 2) >> 20);  // one model
  // The refusal comes after the queue timeout (short: nothing else needs it), while A is held in use.
  Agent agent(cat.redis.address(), cat.store_dir, {"--models-mb", budget_mb, "--queue-timeout-ms", "100"});
  ASSERT_GT(agent.port(), 0) << agent.log();
  const int pa = port_of(load(agent.port(), "x-a").back());
  ASSERT_GT(pa, 0) << agent.log();
  {
    HeldStream long_a(pa, "", "hello world");
    ASSERT_TRUE(eventually([&] { return long_a.tokens() > 0 && model_in_use(agent.port(), "x-a"); }, "A's stream under way"));
    const std::string refused = request(agent.port(), "POST", "/load", R"({"model":"x-b","stream":false})");
    EXPECT_EQ(status_of(refused), 503) << refused;
    EXPECT_NE(body_of(refused).find("in use"), std::string::npos) << refused;
    EXPECT_FALSE(long_a.ended()) << "A was in use throughout B's wait";
    long_a.close();
    EXPECT_TRUE(long_a.exact());
  }
  // Now A is idle: B takes its room.
  ASSERT_TRUE(eventually([&] { return !model_in_use(agent.port(), "x-a"); }, "A idle once its client left"));
  const int pb = port_of(load(agent.port(), "x-b").back());
  ASSERT_GT(pb, 0) << agent.log();
  EXPECT_NE(state_of(agent.port(), "x-a"), "loaded");
  // B's umad dies: the agent sees it, counts it, gives its room back and loads it again on demand.
  const pid_t pid = model_row(agent.port(), "x-b")["pid"].get<pid_t>();
  ASSERT_GT(pid, 0);
  ::kill(pid, SIGKILL);
  ASSERT_TRUE(eventually([&] { return state_of(agent.port(), "x-b") != "loaded"; }, "B's crash seen"));
  EXPECT_EQ(prometheus_value(body_of(http_get(agent.port(), "/metrics")), "uma_agent_model_crashes_total"), 1);
  const int pb2 = port_of(load(agent.port(), "x-b").back());
  ASSERT_GT(pb2, 0) << agent.log();
  EXPECT_EQ(complete(pb2, "hello world", 6), oracle().expected_text("hello world", 6));
  EXPECT_EQ(agent.stop(), 0) << agent.log();
}

TEST(Agent, NothingButHealthIsServedWithoutTheClusterKeyOnTheAgentOrItsModels) {
  Catalog cat;
  ASSERT_TRUE(cat.up({"k-a"}));
  const std::string key_file = temp_dir() + "/agent-key";
  std::ofstream(key_file) << "the-cluster-key\n";
  Agent agent(cat.redis.address(), cat.store_dir, {"--api-key-file", key_file});
  ASSERT_GT(agent.port(), 0) << agent.log();
  for (const std::string key : {"", "wrong", "the-cluster-ke"}) {
    for (const auto& [method, path, body] : std::vector<std::tuple<std::string, std::string, std::string>>{
             {"POST", "/load", R"({"model":"k-a"})"}, {"POST", "/unload", R"({"model":"k-a"})"},
             {"POST", "/prefetch", R"({"model":"k-a","tier":"dram"})"}, {"GET", "/models", ""}, {"GET", "/metrics", ""}}) {
      const std::string r = request(agent.port(), method, path, body, key);
      EXPECT_EQ(status_of(r), 401) << method << " " << path << " key '" << key << "': " << r;
      EXPECT_NE(body_of(r).find("invalid_api_key"), std::string::npos) << r;
    }
  }
  EXPECT_EQ(status_of(request(agent.port(), "GET", "/health", "")), 200);
  EXPECT_EQ(models(agent.port(), "the-cluster-key")["models"][0].value("state", ""), "nvme") << "nothing was loaded";
  const json end = load(agent.port(), "k-a", json::object(), "the-cluster-key").back();
  ASSERT_EQ(end.value("state", ""), "loaded") << end.dump();
  // The model's own OpenAI API takes the same key, and nothing without it.
  const std::string refused = complete_model(port_of(end), "k-a", "hello world", 5);
  EXPECT_EQ(status_of(refused), 401) << refused;
  EXPECT_NE(body_of(refused).find("invalid_api_key"), std::string::npos) << refused;
  EXPECT_EQ(status_of(complete_model(port_of(end), "k-a", "hello world", 5, "wrong")), 401);
  EXPECT_EQ(status_of(http_get(port_of(end), "/health")), 200);
  EXPECT_EQ(complete_model(port_of(end), "k-a", "hello world", 5, "the-cluster-key"), oracle().expected_text("hello world", 5));
  EXPECT_EQ(agent.stop(), 0) << agent.log();
}

// Two gateways, eight requests for a model no agent serves: one lock, one load on the agent, and
// every request served exactly once it is up (the gateways pass the cluster's key to the model's
// umad, which takes nothing without it); an unknown model is still a 404. The agent's room is held
// by another model in use until all eight wait (the gate the test opens): none can find it served.
TEST(AgentCluster, TwoGatewaysOneLockOneLoadAndEveryRequestForTheColdModelServedExactly) {
  Catalog cat;
  ASSERT_TRUE(cat.up({"cold-1", "holder"}));
  const std::string key_file = temp_dir() + "/cluster-key";
  std::ofstream(key_file) << "cluster-secret\n";
  Agent agent(cat.redis.address(), cat.store_dir,
              {"--cluster", "--api-key-file", key_file, "--models-mb", cat.one_model_mb(), "--queue-timeout-ms", kAgentGuardMs});
  ASSERT_GT(agent.port(), 0) << agent.log();
  const json holder = load(agent.port(), "holder", {{"stream", false}}, "cluster-secret").back();
  ASSERT_EQ(holder.value("state", ""), "loaded") << holder.dump() << agent.log();
  HeldStream held(port_of(holder), "holder", "hello world", "cluster-secret");
  // Requests wait for the model, and its lock lives, a hang guard: the lock is read below however slowly the replies came.
  const std::vector<std::string> gw_flags = {"--agent-key-file", key_file, "--queue-timeout-ms", kAgentGuardMs, "--load-lock-ms", kAgentGuardMs};
  Gateway g1(cat.redis.address(), gw_flags), g2(cat.redis.address(), gw_flags);
  ASSERT_TRUE(g1.started() && g2.started()) << g1.log() << g2.log();
  const std::string busy_bytes = "uma_gw_loader_busy_bytes{loader=\"127.0.0.1:" + std::to_string(agent.port()) + "\"}";
  for (const Gateway* g : {&g1, &g2}) {
    const auto held_in_view = [&] { return held.tokens() > 0 && gw_metric(*g, "uma_gw_loaders") == 1 && gw_metric(*g, busy_bytes) > 0; };
    ASSERT_TRUE(eventually(held_in_view, "a gateway's view: the loader, its room held in use")) << g->log();
  }
  std::vector<std::future<std::string>> replies;
  const std::vector<std::string> prompts = {"hello world", "one two three", "the quick brown fox", "a b c d"};
  for (const Gateway* g : {&g1, &g2}) {
    for (const std::string& p : prompts) {
      replies.push_back(std::async(std::launch::async, [port = g->port(), p] { return complete_model(port, "cold-1", p, 12); }));
    }
  }
  ASSERT_TRUE(eventually([&] { return gw_metric(g1, "uma_gw_awaiting_model") + gw_metric(g2, "uma_gw_awaiting_model") == 8; },
                         "all eight requests waiting for the cold model"))
      << g1.log() << g2.log();
  EXPECT_FALSE(held.ended()) << "the holder was in use until now";
  held.close();  // its model goes idle: its room is the cold model's
  for (std::size_t i = 0; i < replies.size(); ++i) {
    EXPECT_EQ(replies[i].get(), oracle().expected_text(prompts[i % prompts.size()], 12)) << g1.log() << g2.log() << agent.log();
  }
  EXPECT_TRUE(held.exact());
  EXPECT_EQ(prometheus_value(body_of(request(agent.port(), "GET", "/metrics", "", "cluster-secret")), "uma_agent_loads_total"), 2)
      << "the holder's, then the cold model's once\n" << agent.log();
  EXPECT_EQ(gw_metric(g1, "uma_gw_model_loads_started_total") + gw_metric(g2, "uma_gw_model_loads_started_total"), 1);
  EXPECT_EQ(gw_metric(g1, "uma_gw_awaited_model_total") + gw_metric(g2, "uma_gw_awaited_model_total"), 8);
  EXPECT_EQ(gw_metric(g1, "uma_gw_failed_total") + gw_metric(g2, "uma_gw_failed_total"), 0);
  // The gateways sent the cluster's key: the model's umad takes nothing without it.
  const std::string direct = request(agent.port(), "GET", "/models", "", "cluster-secret");
  const json rows = json::parse(body_of(direct), nullptr, false);
  ASSERT_TRUE(rows.contains("models")) << direct;
  ASSERT_EQ(rows["models"][0].value("model", ""), "cold-1") << direct;
  EXPECT_EQ(status_of(complete_model(port_of(rows["models"][0]), "cold-1", "hello world", 3)), 401);
  // The lock outlives the load by one lock time, marked done (gateways whose views lag wait for
  // the model rather than load it again), then lapses; the model is served without a wait.
  cluster::RedisAddress addr;
  ASSERT_TRUE(cluster::parse_redis_address(cat.redis.address(), &addr));
  cluster::RedisClient rc(addr, kHangGuard);
  cluster::RedisReply lock, ttl;
  ASSERT_TRUE(rc.command({"GET", cluster::load_lock_key("cold-1")}, &lock).ok());
  EXPECT_EQ(lock.str.rfind("loaded-by-gw-", 0), 0u) << lock.str;
  ASSERT_TRUE(rc.command({"PTTL", cluster::load_lock_key("cold-1")}, &ttl).ok());
  EXPECT_GT(ttl.integer, 0);
  EXPECT_LE(ttl.integer, std::chrono::milliseconds(kHangGuard).count());
  EXPECT_EQ(complete_model(g1.port(), "cold-1", "hello world", 5), oracle().expected_text("hello world", 5));
  EXPECT_EQ(gw_metric(g1, "uma_gw_awaited_model_total") + gw_metric(g2, "uma_gw_awaited_model_total"), 8);
  const std::string unknown = complete_model(g2.port(), "no-such-model", "hello", 4);
  EXPECT_EQ(status_of(unknown), 404) << unknown;
  EXPECT_EQ(agent.stop(), 0) << agent.log();
}

// Live migration: both loaders' budgets are held by one model with streams in flight (held: the
// cold model cannot load until they move), a request comes for a cold model: the gateway moves its
// streams off one loader (resumed token-exactly on the other, which serves the same model), and the
// cold model loads in the room they leave. The request comes once the gateway's view shows both
// loaders' model in use (the choice itself moves the streams); at once, on a view a beat behind the
// streams (the load is sent where the view shows room, queues there behind the model in use, and
// the streams move once the view shows it queued); or through another gateway than the streams'
// (it has none to move: the streams' gateway moves them once its view shows the load queued).
// Which way the choice goes is timing: the streams must move exactly once either way.
enum class ColdAsked { kOnceTheViewShowsTheStreams, kAtOnce, kThroughAnotherGateway };

void live_migration_makes_room(ColdAsked asked) {
  Catalog cat;
  ASSERT_TRUE(cat.up({"busy", "cold"}));
  const std::string second_store = cat.store_dir + "-2";
  fs::create_directories(second_store);
  for (const char* id : {"busy", "cold"}) fs::copy_file(cat.store_dir + "/" + id + ".gguf", second_store + "/" + id + ".gguf");
  // Room for one model, not two; a load queued behind the streams waits for them to move.
  const std::vector<std::string> loader = {"--cluster", "--models-mb", cat.one_model_mb(), "--queue-timeout-ms", kAgentGuardMs};
  Agent a(cat.redis.address(), cat.store_dir, loader), c(cat.redis.address(), second_store, loader);
  ASSERT_TRUE(a.port() > 0 && c.port() > 0) << a.log() << c.log();
  for (const Agent* x : {&a, &c}) ASSERT_EQ(load(x->port(), "busy", {{"stream", false}}).back().value("state", ""), "loaded");
  Gateway g(cat.redis.address(), {"--policy", "round-robin", "--queue-timeout-ms", kAgentGuardMs});  // the streams spread over both
  ASSERT_TRUE(g.started()) << g.log();
  std::unique_ptr<Gateway> other;
  if (asked == ColdAsked::kThroughAnotherGateway) {
    other = std::make_unique<Gateway>(cat.redis.address(), std::vector<std::string>{"--queue-timeout-ms", kAgentGuardMs});
    ASSERT_TRUE(other->started()) << other->log();
  }
  for (const Gateway* x : {&g, other.get()}) {
    const auto both = [&] { return gw_metric(*x, "uma_gw_loaders") == 2 && gw_metric(*x, "uma_gw_agents_live") == 2; };
    if (x != nullptr) {
      ASSERT_TRUE(eventually(both, "a gateway's view: both loaders, both agents live")) << x->log();
    }
  }
  const Gateway& asker = other ? *other : g;
  const auto loader_id = [](const Agent& x) { return "127.0.0.1:" + std::to_string(x.port()); };
  const auto busy_in_gateways_view = [&](const Agent& x) { return gw_metric(g, "uma_gw_loader_busy_bytes{loader=\"" + loader_id(x) + "\"}") > 0; };
  const auto streams_at = [&](const Agent& x) { return gw_metric(g, "uma_gw_agent_sessions{agent=\"" + loader_id(x) + "/busy\"}"); };
  // Streams until each loader has one (round-robin: one each; at most four).
  std::vector<std::unique_ptr<HeldStream>> streams;
  const std::vector<std::string> prompts = {"hello world", "one two three", "the quick brown fox", "a b c d"};
  for (std::size_t i = 0; i < prompts.size() && !(streams_at(a) > 0 && streams_at(c) > 0); ++i) {
    streams.push_back(std::make_unique<HeldStream>(g.port(), "busy", prompts[i]));
    ASSERT_TRUE(eventually([&] { return streams.back()->tokens() > 0; }, "stream " + std::to_string(i) + " under way")) << g.log();
  }
  const auto in_use = [](const Agent& x) { return model_in_use(x.port(), "busy"); };
  ASSERT_TRUE(eventually([&] { return in_use(a) && in_use(c); }, "both loaders' model in use"))
      << model_row(a.port(), "busy").dump() << " " << model_row(c.port(), "busy").dump() << "\n" << g.log();
  if (asked == ColdAsked::kOnceTheViewShowsTheStreams) {
    ASSERT_TRUE(eventually([&] { return busy_in_gateways_view(a) && busy_in_gateways_view(c); }, "the gateway's view showing both in use"))
        << g.log();
  }
  for (const auto& s : streams) ASSERT_FALSE(s->ended()) << "every stream is in flight when the cold model is asked for";
  HeldStream cold(asker.port(), "cold", "hello world", "", 12);
  ASSERT_TRUE(eventually([&] { return cold.ended(); }, "the cold model's reply")) << g.log() << asker.log();
  EXPECT_TRUE(cold.exact()) << g.log() << asker.log();
  // Each stream goes on past the move (those moved, resumed elsewhere) until the test ends it.
  const auto ended_first = std::count_if(streams.begin(), streams.end(), [](const auto& s) { return s->ended(); });
  for (std::size_t i = 0; i < streams.size(); ++i) {
    const std::size_t at = streams[i]->tokens();
    EXPECT_TRUE(eventually([&] { return streams[i]->ended() || streams[i]->tokens() >= at + 16; }, "stream " + std::to_string(i) + " going on"));
    streams[i]->close();
    EXPECT_TRUE(streams[i]->exact()) << "stream " << i << " stayed exact\n" << g.log();
  }
  EXPECT_EQ(gw_metric(g, "uma_gw_migrations_total"), 1) << ended_first << " streams had ended by the cold reply\n" << g.log() << a.log() << c.log();
  EXPECT_GE(gw_metric(g, "uma_gw_migrated_total"), 1);
  EXPECT_EQ(gw_metric(g, "uma_gw_resumes_total"), gw_metric(g, "uma_gw_migrated_total")) << "every stream moved had its first tokens";
  EXPECT_EQ(gw_metric(g, "uma_gw_failed_total"), 0);
  if (other) {
    EXPECT_EQ(gw_metric(*other, "uma_gw_migrations_total"), 0) << "it had no streams to move\n" << other->log();
    EXPECT_EQ(gw_metric(*other, "uma_gw_failed_total"), 0);
  }
  const double room_unloads =
      prometheus_value(body_of(request(a.port(), "GET", "/metrics", "")), "uma_agent_unloads_total{reason=\"room\"}") +
      prometheus_value(body_of(request(c.port(), "GET", "/metrics", "")), "uma_agent_unloads_total{reason=\"room\"}");
  EXPECT_EQ(room_unloads, 1);
}

TEST(AgentCluster, LiveMigrationMovesStreamsOffALoaderToMakeRoomForAColdModelAndEveryStreamStaysExact) {
  live_migration_makes_room(ColdAsked::kOnceTheViewShowsTheStreams);
}

TEST(AgentCluster, ALoadSentOnAViewBehindTheStreamsQueuesAndTheStreamsMoveOffItsLoader) {
  live_migration_makes_room(ColdAsked::kAtOnce);
}

TEST(AgentCluster, AnotherGatewaysLoadQueuedBehindTheStreamsMovesThemOff) {
  live_migration_makes_room(ColdAsked::kThroughAnotherGateway);
}

// nginx serving the oracle model as the remote tier, and Redis with it in the catalog as `id`.
struct RemoteCatalog {
  NginxServer nginx;
  RedisServer redis;
  store::Manifest manifest;
  ::testing::AssertionResult up(const std::string& id) {
    if (!nginx.start()) return ::testing::AssertionFailure() << "nginx: " << nginx.log();
    fs::copy_file(model_path("oracle.gguf"), fs::path(nginx.root()) / "oracle.gguf");
    if (!redis.start()) return ::testing::AssertionFailure() << "redis";
    cluster::RedisClient rc(redis.cluster_address(), kHangGuard);
    if (Status s = store::build_manifest(model_path("oracle.gguf"), id, 1 << 20, 2, &manifest); !s.ok()) {
      return ::testing::AssertionFailure() << s.to_string();
    }
    if (Status s = cluster::catalog_put(rc, manifest, nginx.url("oracle.gguf")); !s.ok()) {
      return ::testing::AssertionFailure() << s.to_string();
    }
    return ::testing::AssertionSuccess();
  }
};

// Fan-out: a model asked for often enough is prefetched to the loader that lacks it (from the
// remote tier, nginx), so a load there would start from its NVMe tier.
TEST(AgentCluster, ABusyModelIsPrefetchedToTheOtherLoadersNvmeTierFromTheRemoteTier) {
  if (skip_remote_tier_tests()) GTEST_SKIP() << "no remote tier on this machine";
  RemoteCatalog remote;
  ASSERT_TRUE(remote.up("busy"));
  RedisServer& redis = remote.redis;
  std::vector<std::unique_ptr<Agent>> agents;
  for (int i = 0; i < 2; ++i) {
    const std::string dir = temp_dir() + "/fan-out-store-" + std::to_string(i);
    fs::create_directories(dir);
    agents.push_back(std::make_unique<Agent>(redis.address(), dir, std::vector<std::string>{"--cluster"}));
    ASSERT_GT(agents.back()->port(), 0) << agents.back()->log();
  }
  Gateway g(redis.address(), {"--fan-out", "2", "--fan-out-rps", "0.2"});
  ASSERT_TRUE(g.started()) << g.log();
  ASSERT_TRUE(eventually([&] { return gw_metric(g, "uma_gw_loaders") == 2; }, "both loaders in the gateway's view")) << g.log();
  // 0.2/s with the rate's 30 s half-life: about ten requests in a few seconds make it busy.
  for (int i = 0; i < 12; ++i) EXPECT_EQ(complete_model(g.port(), "busy", "hello world", 4), oracle().expected_text("hello world", 4));
  const auto row_on = [&](const Agent& a) {  // "state/tier" of the model on `a`
    const json r = model_row(a.port(), "busy");
    return r.value("state", "none") + "/" + r.value("tier", "");
  };
  // One agent loaded it from the remote tier; the other gets it on its NVMe tier by fan-out.
  ASSERT_TRUE(eventually([&] {
    const std::string a = row_on(*agents[0]), b = row_on(*agents[1]);
    return (a.starts_with("loaded/") && b == "nvme/nvme") || (b.starts_with("loaded/") && a == "nvme/nvme");
  }, "the model loaded on one loader and prefetched to the other's NVMe tier"))
      << row_on(*agents[0]) << " " << row_on(*agents[1]) << "\n" << g.log();
  EXPECT_EQ(gw_metric(g, "uma_gw_prefetches_total"), 1) << g.log();
  EXPECT_EQ(gw_metric(g, "uma_gw_prefetch_failures_total"), 0);
  EXPECT_EQ(gw_metric(g, "uma_gw_model_loads_started_total"), 1);
}

// Ollama's pull through the gateway: the catalog model comes from the remote tier (nginx) to the
// loader's NVMe tier with its progress, and is not loaded.
TEST(AgentCluster, TheOllamaNodeSdkPullsACatalogModelFromTheRemoteTierToALoadersNvmeTier) {
  if (skip_remote_tier_tests()) GTEST_SKIP() << "no remote tier on this machine";
  if (!node_sdks_available()) GTEST_SKIP() << "no node or the ollama library here (scripts/npm_deps.sh)";
  RemoteCatalog remote;
  ASSERT_TRUE(remote.up("pulled"));
  RedisServer& redis = remote.redis;
  const std::string dir = temp_dir() + "/pull-store";
  fs::create_directories(dir);
  Agent agent(redis.address(), dir, {"--cluster"});
  ASSERT_GT(agent.port(), 0) << agent.log();
  Gateway g(redis.address(), {});
  ASSERT_TRUE(g.started()) << g.log();
  ASSERT_TRUE(eventually([&] { return gw_metric(g, "uma_gw_loaders") == 1; }, "the loader in the gateway's view")) << g.log();
  EXPECT_EQ(state_of(agent.port(), "pulled"), "remote");
  std::string out;
  EXPECT_EQ(run_command({"/usr/bin/env", "NODE_PATH=" UMA_NODE_MODULES, "node", UMA_SOURCE_DIR "/tests/http/ollama_pull_test.js",
                         g.url(), "pulled", std::to_string(remote.manifest.bytes)},
                        &out),
            0)
      << out << g.log() << agent.log();
  EXPECT_NE(out.find("ollama pull: all passed"), std::string::npos) << out;
  const json row = model_row(agent.port(), "pulled");
  EXPECT_EQ(row.value("state", "") + "/" + row.value("tier", ""), "nvme/nvme") << row.dump();
  EXPECT_EQ(gw_metric(g, "uma_gw_model_loads_started_total"), 0) << "a pull loads nothing";
}

}  // namespace
}  // namespace uma::test
