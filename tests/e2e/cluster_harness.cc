#include "e2e/cluster_harness.h"

#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "e2e/http_client.h"

namespace uma::test {

Gateway::Gateway(const std::string& redis_address, std::vector<std::string> extra) {
  static int counter = 0;
  log_path_ = temp_dir() + "/uma-gw-" + std::to_string(counter++) + ".log";
  std::vector<std::string> argv = {bin_path("uma-gw"), "--redis", redis_address, "--refresh-ms", "100"};
  // The oracle's vocabulary and chatml, unless `extra` names its own (an empty value: none).
  const auto given = [&](const char* flag) { return std::find(extra.begin(), extra.end(), flag) != extra.end(); };
  if (!given("--listen")) argv.insert(argv.end(), {"--listen", "127.0.0.1:0"});
  if (!given("--model")) argv.insert(argv.end(), {"--model", model_path("oracle.gguf")});
  if (!given("--chat-template")) argv.insert(argv.end(), {"--chat-template", "chatml"});
  argv.insert(argv.end(), extra.begin(), extra.end());
  pid_ = spawn_process(argv, log_path_);
  port_ = port_from_log(log_path_, "listening on http://127.0.0.1:", &pid_);
}

int port_from_log(const std::string& log_path, const std::string& marker, pid_t* pid, int* status) {
  int port = -1;
  wait_for([&] {
    const std::string log = slurp(log_path);
    const auto at = log.find(marker);
    if (at != std::string::npos) {
      port = std::stoi(log.substr(at + marker.size()));
      return true;
    }
    int st = 0;
    if (::waitpid(*pid, &st, WNOHANG) != *pid) return false;
    *pid = -1;
    if (status != nullptr) *status = st;
    return true;
  });
  return port;
}

Gateway::~Gateway() { kill_process(&pid_); }

int Gateway::stop() { return stop_process(&pid_); }

std::string Gateway::log() const { return slurp(log_path_); }

std::string http_get(int port, const std::string& path) {
  Tcp t(port);
  if (!t.connected() || !t.send("GET " + path + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")) return "";
  return t.response(kHangGuard);
}

double prometheus_value(const std::string& page, const std::string& name) {
  std::istringstream in(page);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(name + " ", 0) == 0) return std::stod(line.substr(name.size() + 1));
  }
  return -1;
}

std::string post_completion(int port, const std::string& prompt, int n) {
  Tcp t(port);
  if (!t.send(post("/v1/completions", nlohmann::json({{"prompt", prompt}, {"max_tokens", n}}).dump()))) return "no connection";
  return t.response();
}

std::string complete(int port, const std::string& prompt, int n) {
  const std::string r = post_completion(port, prompt, n);
  if (status_of(r) != 200) return r;
  const auto j = nlohmann::json::parse(body_of(r), nullptr, false);
  if (j.is_discarded() || !j.contains("choices")) return r;
  return j["choices"][0].value("text", r);
}

double gw_metric(const Gateway& g, const std::string& name) { return prometheus_value(body_of(http_get(g.port(), "/metrics")), name); }

std::vector<double> gw_series(const Gateway& g, const std::string& name) {
  const std::string page = body_of(http_get(g.port(), "/metrics"));
  std::vector<double> out;
  const std::string key = name + "{";
  for (std::size_t at = page.find(key); at != std::string::npos; at = page.find(key, at + 1)) {
    out.push_back(std::stod(page.substr(page.find("} ", at) + 2)));
  }
  return out;
}

int live_agents(const Gateway& g) {
  const auto j = nlohmann::json::parse(body_of(http_get(g.port(), "/health")), nullptr, false);
  return j.is_discarded() ? -1 : j.value("live", -1);
}

bool LocalCluster::add_agent(const std::string& model, std::vector<std::string> extra) {
  std::vector<std::string> a = {"--agent", "--redis", redis.address()};
  a.insert(a.end(), extra.begin(), extra.end());
  // One compute thread per agent unless the test chooses: several agents of two spinning
  // threads beside another test on CI's two cores ran 20x slower (queued requests overran the
  // client's 30 s).
  if (std::find(a.begin(), a.end(), "--threads") == a.end()) a.insert(a.end(), {"--threads", "1"});
  agents.push_back(std::make_unique<Daemon>(http_args(a), model));
  return agents.back()->started();
}

bool LocalCluster::up(int n_agents, int n_gateways, std::vector<std::string> agent_extra,
                      std::vector<std::string> gateway_extra) {
  if (!redis.start()) return false;
  for (int i = 0; i < n_agents; ++i) {
    if (!add_agent("oracle.gguf", agent_extra)) return false;
  }
  for (int i = 0; i < n_gateways; ++i) {
    gateways.push_back(std::make_unique<Gateway>(redis.address(), gateway_extra));
    if (!gateways.back()->started()) return false;
  }
  return all_live(static_cast<std::size_t>(n_agents));
}

bool LocalCluster::all_live(std::size_t n, std::chrono::milliseconds timeout) {
  return wait_for([&] {
    for (const auto& g : gateways) {
      const std::string r = http_get(g->port(), "/health");
      if (status_of(r) != 200) return false;
      const auto j = nlohmann::json::parse(body_of(r), nullptr, false);
      if (j.is_discarded() || j.value("live", 0) != static_cast<int>(n)) return false;
    }
    return true;
  }, timeout).has_value();
}

int LocalCluster::agent_port(std::size_t i) const { return http_port(*agents.at(i)); }

}  // namespace uma::test
