// umad with several models (--models-dir, several --model): one port, a umad per model behind it
// (daemon/model_router.h), real processes end to end. The request's `model` picks one, loaded on
// its first request; exact oracle outputs whole and streamed; the least recently used goes for
// room; a request's keep_alive; unknown and missing models; the API key on the front and behind it.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <signal.h>
#include <sys/wait.h>

#include <filesystem>
#include <fstream>

#include "e2e/cluster_harness.h"
#include "e2e/http_client.h"
#include "e2e/openai_sdk_run.h"
#include "e2e/oracle.h"

namespace uma::test {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace std::chrono_literals;

class Router {
 public:
  explicit Router(std::vector<std::string> extra) {
    static int counter = 0;
    log_path_ = temp_dir() + "/umad-router-" + std::to_string(counter++) + ".log";
    std::vector<std::string> argv = {bin_path("umad"), "--http", "127.0.0.1:0", "--threads", "1", "--n-ctx", "2048",
                                     "--max-sessions", "4"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    pid_ = spawn_process(argv, log_path_);
    port_ = port_from_log(log_path_, "http listening on 127.0.0.1:", &pid_, &status_);
  }
  // A router killed outright leaves its run folder (its models' logs and sockets) behind.
  ~Router() {
    if (stop() == -2) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  // SIGTERM: its exit status (-1: a signal ended it, -2: still running after the hang guard).
  int stop() {
    if (pid_ <= 0) return exit_code();
    ::kill(pid_, SIGTERM);
    const int rc = wait_exit(pid_, kHangGuard);
    if (rc != -2) pid_ = -1;
    return rc;
  }
  int port() const { return port_; }
  int exit_code() const { return WIFEXITED(status_) ? WEXITSTATUS(status_) : -1; }  // once it has exited
  std::string log() const { return slurp(log_path_); }

 private:
  std::string log_path_;
  pid_t pid_ = -1;
  int port_ = -1;
  int status_ = -1;
};

std::string post_to(int port, const std::string& path, const json& body, const std::string& key = "") {
  Tcp t(port);
  const std::string b = body.dump();
  const std::string auth = key.empty() ? "" : "Authorization: Bearer " + key + "\r\n";
  if (!t.send("POST " + path + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + auth +
              "Content-Type: application/json\r\nContent-Length: " + std::to_string(b.size()) + "\r\n\r\n" + b)) {
    return "";
  }
  return t.response();
}

std::string streamed_text(const std::string& response) {
  const std::string sse = dechunk(body_of(response));
  std::string text;
  for (std::size_t at = sse.find("data: "); at != std::string::npos; at = sse.find("data: ", at + 1)) {
    const std::size_t end = sse.find("\n\n", at);
    const json j = json::parse(sse.substr(at + 6, end - at - 6), nullptr, false);
    if (!j.is_discarded() && j.contains("choices") && !j["choices"].empty()) text += j["choices"][0].value("text", "");
  }
  return text;
}

std::string model_state(int port, const std::string& model) {
  const json j = json::parse(body_of(http_get(port, "/v1/models")), nullptr, false);
  if (j.is_discarded()) return "";
  for (const json& m : j["data"]) {
    if (m["id"] == model) return m["state"];
  }
  return "absent";
}

TEST(UmadModels, OnePortServesADirectoryOfModelsEachLoadedOnFirstUseTheLeastRecentlyUsedOutForRoom) {
  const std::string dir = temp_dir() + "/models-dir";
  fs::create_directories(dir);
  fs::create_symlink(model_path("oracle.gguf"), dir + "/oracle.gguf");
  fs::create_symlink(model_path("oracle-qwen25-template.gguf"), dir + "/qwen.gguf");
  std::ofstream(dir + "/notes.txt") << "not a model";
  ::setenv("UMA_MODELS_DIR", dir.c_str(), 1);  // as a variable: its models' umads must not inherit it
  Router r({"--max-models", "1"});
  ::unsetenv("UMA_MODELS_DIR");
  ASSERT_GT(r.port(), 0) << r.log();
  const int port = r.port();
  const json models = json::parse(body_of(http_get(port, "/v1/models")));
  ASSERT_EQ(models["data"].size(), 2u) << models;
  EXPECT_EQ(models["data"][0]["id"], "oracle");
  EXPECT_EQ(models["data"][0]["state"], "unloaded");
  EXPECT_EQ(models["data"][1]["id"], "qwen");

  const std::string expected = oracle().expected_text("the river", 6);
  std::string a = post_to(port, "/v1/completions", {{"model", "oracle"}, {"prompt", "the river"}, {"max_tokens", 6}});
  ASSERT_EQ(status_of(a), 200) << a << r.log();
  EXPECT_EQ(json::parse(body_of(a))["choices"][0]["text"], expected);
  EXPECT_EQ(model_state(port, "oracle"), "loaded");
  a = post_to(port, "/v1/completions", {{"model", "oracle.gguf"}, {"prompt", "the river"}, {"max_tokens", 6}, {"stream", true}});
  ASSERT_EQ(status_of(a), 200) << a;
  EXPECT_EQ(streamed_text(a), expected) << "streamed through the router, chunk by chunk";

  // The other model: its own chat template; the oracle goes for room (--max-models 1).
  a = post_to(port, "/v1/chat/completions", {{"model", "qwen"}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"max_tokens", 3}});
  ASSERT_EQ(status_of(a), 200) << a << r.log();
  EXPECT_EQ(model_state(port, "oracle"), "unloaded");
  EXPECT_EQ(model_state(port, "qwen"), "loaded");
  a = post_to(port, "/v1/completions", {{"model", "oracle"}, {"prompt", "the river"}, {"max_tokens", 6}, {"keep_alive", 0}});
  ASSERT_EQ(status_of(a), 200) << a;
  EXPECT_EQ(json::parse(body_of(a))["choices"][0]["text"], expected);
  ASSERT_TRUE(eventually([&] { return model_state(port, "oracle") == "unloaded"; }, "keep_alive 0 to unload the idle model"));

  const std::string metrics = body_of(http_get(port, "/metrics"));
  EXPECT_EQ(prometheus_value(metrics, "uma_agent_loads_total"), 3);
  EXPECT_EQ(prometheus_value(metrics, "uma_agent_unloads_total{reason=\"room\"}"), 2);
  EXPECT_EQ(prometheus_value(metrics, "uma_agent_unloads_total{reason=\"keep_alive\"}"), 1);
  EXPECT_EQ(prometheus_value(metrics, "uma_router_relayed_total"), 4);

  a = post_to(port, "/v1/completions", {{"model", "gpt-4o"}, {"prompt", "x"}});
  EXPECT_EQ(status_of(a), 404) << a;
  EXPECT_EQ(json::parse(body_of(a))["error"]["code"], "model_not_found");
  a = post_to(port, "/v1/completions", {{"prompt", "x"}});
  EXPECT_EQ(status_of(a), 400) << a;
  EXPECT_EQ(json::parse(body_of(a))["error"]["param"], "model");
  a = post_to(port, "/v1/completions", {{"model", "oracle"}, {"prompt", "x"}, {"keep_alive", "soon"}});
  EXPECT_EQ(status_of(a), 400) << a;
}

TEST(UmadModels, SeveralModelFilesBehindOneKeyAndTheFlagsThatCannotGoTogether) {
  const std::string key_file = temp_dir() + "/router-key";
  std::ofstream(key_file) << "sesame\n";
  // The flags' forms the router takes out of its models' command lines, and its environment.
  ::setenv("UMA_KEEP_ALIVE", "10m", 1);  // the router's; a model's umad has no such flag
  Router r({"-m", model_path("oracle.gguf"), "--model=" + model_path("tiny-f16.gguf"), "-s", temp_dir() + "/router.sock",
            "--api-key-file", key_file});
  ::unsetenv("UMA_KEEP_ALIVE");
  ASSERT_GT(r.port(), 0) << r.log();
  const json body = {{"model", "oracle"}, {"prompt", "the river"}, {"max_tokens", 6}};
  EXPECT_EQ(status_of(post_to(r.port(), "/v1/completions", body)), 401);
  const std::string a = post_to(r.port(), "/v1/completions", body, "sesame");
  ASSERT_EQ(status_of(a), 200) << a << r.log();  // the model's own umad takes the key too
  EXPECT_EQ(json::parse(body_of(a))["choices"][0]["text"], oracle().expected_text("the river", 6));
  EXPECT_EQ(status_of(post_to(r.port(), "/v1/completions", {{"model", "tiny-f16"}, {"prompt", "x"}, {"max_tokens", 2}}, "sesame")), 200);
  EXPECT_EQ(status_of(http_get(r.port(), "/health")), 200) << "open without the key";
  const std::string page = http_get(r.port(), "/");
  EXPECT_EQ(status_of(page), 200) << "the web page too";
  EXPECT_NE(body_of(page).find("<title>UMA Serve</title>"), std::string::npos);
  // Stopped, it stops its models and takes their logs' and sockets' folder with it.
  const std::string marker = "their logs in ";
  const std::string log = r.log();
  const std::size_t at = log.find(marker);
  ASSERT_NE(at, std::string::npos) << log;
  const std::string run_dir = log.substr(at + marker.size(), log.find(')', at) - at - marker.size());
  EXPECT_TRUE(fs::exists(run_dir + "/oracle.log")) << run_dir;
  EXPECT_EQ(r.stop(), 0) << r.log();
  EXPECT_FALSE(fs::exists(run_dir)) << run_dir;

  const std::string empty_dir = temp_dir() + "/no-models-here";
  fs::create_directories(empty_dir);
  Router empty({"--models-dir", empty_dir});
  EXPECT_EQ(empty.port(), -1);
  EXPECT_EQ(empty.exit_code(), 2);
  EXPECT_NE(empty.log().find("no models"), std::string::npos) << empty.log();
  Router as_agent({"--models-dir", model_path(""), "--agent"});
  EXPECT_EQ(as_agent.port(), -1);
  EXPECT_EQ(as_agent.exit_code(), 2);
  EXPECT_NE(as_agent.log().find("uma-agent is that"), std::string::npos) << as_agent.log();
}

}  // namespace
}  // namespace uma::test

namespace uma::test {
namespace {

// Ollama's clients on a router: tags and ps from its table, keep_alive 0 unloading a model.
TEST(UmadModels, TheOllamaNodeSdkListsLoadsAndUnloadsModels) {
  if (!node_sdks_available()) GTEST_SKIP() << "no node or the ollama library here (scripts/npm_deps.sh)";
  Router r({"-m", model_path("oracle.gguf"), "-m", model_path("tiny-f16.gguf"), "-s", temp_dir() + "/router-ollama.sock"});
  ASSERT_GT(r.port(), 0) << r.log();
  std::string out;
  EXPECT_EQ(run_command({"/usr/bin/env", "NODE_PATH=" UMA_NODE_MODULES, "node", UMA_SOURCE_DIR "/tests/http/ollama_router_test.js",
                         "http://127.0.0.1:" + std::to_string(r.port()), "oracle", "tiny-f16"},
                        &out),
            0)
      << out << r.log();
  EXPECT_NE(out.find("ollama router: all passed"), std::string::npos) << out;
}

}  // namespace
}  // namespace uma::test
