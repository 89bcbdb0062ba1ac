// A local cluster for the gateway tests: a real redis-server, umad agents on the oracle model
// (chatml), and uma-gw gateways, each a real process on loopback.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "e2e/daemon_harness.h"
#include "e2e/redis_harness.h"

namespace uma::test {

// The port a spawned server writes after `marker` in its log, once it does (the hang guard at most); -1 when
// it exited first (reaped: *pid becomes -1, its wait status goes to *status) or never said it.
int port_from_log(const std::string& log_path, const std::string& marker, pid_t* pid, int* status = nullptr);

class Gateway {
 public:
  // `extra` may name a --listen of its own (a restarted gateway on its predecessor's port).
  Gateway(const std::string& redis_address, std::vector<std::string> extra = {});
  ~Gateway();  // SIGKILL if still running
  // SIGTERM (a drain, --drain-sec), then its exit: the exit code, -1 when a signal ended it, -2
  // when it still ran after the hang guard (then killed).
  int stop();
  bool started() const { return port_ > 0; }
  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  std::string log() const;
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  std::string log_path_;
  pid_t pid_ = -1;
  int port_ = -1;
};

// GET `path` on 127.0.0.1:port: the whole response ("" when it could not be had).
std::string http_get(int port, const std::string& path);
// A gauge or counter of a Prometheus text page (-1 when absent).
double prometheus_value(const std::string& page, const std::string& name);

// A completion of `n` tokens through the gateway (or agent) on `port`: the whole response, and its
// text or, when it failed, the whole response.
std::string post_completion(int port, const std::string& prompt, int n);
std::string complete(int port, const std::string& prompt, int n);
double gw_metric(const Gateway& g, const std::string& name);
int live_agents(const Gateway& g);  // its /health's count, -1 when it does not answer
// Every value of a labelled gauge `name` (uma_gw_agent_blocks, ...) on a gateway's /metrics.
std::vector<double> gw_series(const Gateway& g, const std::string& name);

struct LocalCluster {
  bool up(int agents, int gateways, std::vector<std::string> agent_extra = {}, std::vector<std::string> gateway_extra = {});
  // One more agent on `model` (build/models/), redis started: for a cluster of several models.
  bool add_agent(const std::string& model, std::vector<std::string> extra = {});
  // Every gateway routes to `n` agents (their event streams are live).
  bool all_live(std::size_t n, std::chrono::milliseconds timeout = kHangGuard);
  int agent_port(std::size_t i) const;
  RedisServer redis;
  std::vector<std::unique_ptr<Daemon>> agents;
  std::vector<std::unique_ptr<Gateway>> gateways;
};

}  // namespace uma::test
