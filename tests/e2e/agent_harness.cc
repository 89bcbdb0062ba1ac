#include "e2e/agent_harness.h"

#include <signal.h>
#include <sys/wait.h>

#include <filesystem>

#include "cluster/model_catalog.h"
#include "cluster/redis_client.h"
#include "e2e/cluster_harness.h"
#include "e2e/http_client.h"
#include "store/manifest.h"

namespace uma::test {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {
// Two held streams (kHeldStreamTokens) fit one umad's context.
const char* const kUmadFlags[] = {"--", "--threads", "1", "--max-tokens", "20000", "--n-ctx", "49152", "--max-sessions", "4"};
}  // namespace

Agent::Agent(const std::string& redis, const std::string& store_dir, std::vector<std::string> extra) {
  static int counter = 0;
  const std::string name = "uma-agent-" + std::to_string(counter++);
  log_path_ = temp_dir() + "/" + name + ".log";
  run_dir_ = temp_dir() + "/" + name;
  std::vector<std::string> argv = {bin_path("uma-agent"), "--listen", "127.0.0.1:0", "--redis", redis,
                                   "--store-dir", store_dir, "--run-dir", run_dir_};
  argv.insert(argv.end(), extra.begin(), extra.end());
  argv.insert(argv.end(), std::begin(kUmadFlags), std::end(kUmadFlags));
  pid_ = spawn_process(argv, log_path_);
  port_ = port_from_log(log_path_, "agent listening on 127.0.0.1:", &pid_);
}

Agent::~Agent() { kill_process(&pid_); }

int Agent::stop() { return stop_process(&pid_); }

std::string Agent::log() const { return slurp(log_path_); }

std::string http_request(const std::string& method, const std::string& path, const std::string& body, const std::string& key) {
  const std::string auth = key.empty() ? "" : "Authorization: Bearer " + key + "\r\n";
  return method + " " + path + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + auth + "Content-Type: application/json\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\n\r\n" + body;
}

std::string request(int port, const std::string& method, const std::string& path, const std::string& body, const std::string& key) {
  Tcp t(port);
  return t.send(http_request(method, path, body, key)) ? t.response() : "";
}

std::vector<json> load(int port, const std::string& model, const json& extra, const std::string& key) {
  json body = extra;
  body["model"] = model;
  const std::string r = request(port, "POST", "/load", body.dump(), key);
  std::vector<json> events;
  const std::string data = dechunk(body_of(r));
  for (std::size_t at = data.find("data: "); at != std::string::npos; at = data.find("data: ", at + 1)) {
    events.push_back(json::parse(data.substr(at + 6, data.find("\n\n", at) - at - 6), nullptr, false));
  }
  if (events.empty()) {  // "stream": false: one JSON answer
    const json whole = json::parse(body_of(r), nullptr, false);
    events.push_back(whole.is_object() ? whole : json{{"raw", r}});
  }
  return events;
}

int port_of(const json& loaded) {
  const std::string url = loaded.value("http", "");
  return url.empty() ? -1 : std::stoi(url.substr(url.rfind(':') + 1));
}

json models(int port, const std::string& key) { return json::parse(body_of(request(port, "GET", "/models", "", key)), nullptr, false); }

json model_row(int port, const std::string& id) {
  const json all = models(port);
  if (!all.contains("models")) return json::object();
  for (const json& m : all["models"]) {
    if (m["model"] == id) return m;
  }
  return json::object();
}

std::string state_of(int port, const std::string& id) { return model_row(port, id).value("state", "absent"); }
bool model_in_use(int port, const std::string& id) { return model_row(port, id).value("in_use", false); }
bool model_gone(int port, const std::string& id) {
  const std::string state = state_of(port, id);
  return state != "loaded" && state != "unloading";
}

std::string complete_model(int port, const std::string& model, const std::string& prompt, int n, const std::string& key) {
  const std::string r = request(port, "POST", "/v1/completions", json({{"model", model}, {"prompt", prompt}, {"max_tokens", n}}).dump(), key);
  const json j = json::parse(body_of(r), nullptr, false);
  if (status_of(r) != 200 || j.is_discarded() || !j.contains("choices")) return r;
  return j["choices"][0].value("text", r);
}

bool Catalog::up(const std::vector<std::string>& ids) {
  if (!redis.start()) return false;
  store_dir = temp_dir() + "/agent-store-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
  fs::remove_all(store_dir);
  fs::create_directories(store_dir);
  cluster::RedisAddress addr;
  if (!cluster::parse_redis_address(redis.address(), &addr)) return false;
  cluster::RedisClient rc(addr, kHangGuard);
  for (const std::string& id : ids) {
    store::Manifest m;
    if (!store::build_manifest(model_path("oracle.gguf"), id, 1 << 20, 2, &m).ok()) return false;
    if (!cluster::catalog_put(rc, m, "").ok()) return false;
    fs::copy_file(model_path("oracle.gguf"), store_dir + "/" + id + ".gguf");
    bytes = m.bytes;
  }
  return true;
}

std::string Catalog::another_store(const std::vector<std::string>& ids) const {
  const std::string dir = store_dir + "-" + std::to_string(counter++);
  fs::create_directories(dir);
  for (const std::string& id : ids) fs::copy_file(store_dir + "/" + id + ".gguf", dir + "/" + id + ".gguf");
  return dir;
}

}  // namespace uma::test
