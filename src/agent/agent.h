// Agent: one uma-agent (docs/AGENT.md). Owns the model store (its DRAM and NVMe tiers, the
// catalog's URLs as the remote tier), runs one umad per loaded model (agent/model_host.h) and
// serves the management API (agent/agent_api.h). With `cluster`, it beats this loader's state to
// Redis (publish/loader_beat.h) every 250 ms so gateways load models here on demand. SIGTERM:
// every umad drains for drain_sec (gateways move its streams to other agents); SIGINT: every umad
// stops at once; SIGKILL 10 s after that, then run() returns 0.
//
// Ownership: the members are destroyed in reverse order, the teardown order: the beat before the
// host whose state it tells, the host (its umads) before the API and the server, the catalog's
// Redis client and the store last. run() stops the store (ending fills the host may wait for) and
// frees the API and the host before that.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>

#include <memory>
#include <string>

#include "agent/agent_api.h"
#include "agent/model_host.h"
#include "cluster/redis_client.h"
#include "httpkit/request_server.h"
#include "publish/loader_beat.h"
#include "store/tier_store.h"

namespace uma::agent {

// What uma-agent's flags come to, checked and derived (agent_main.cc).
struct AgentSetup {
  RequestServerConfig server;
  HostConfig host;
  store::TierConfig store;
  cluster::RedisAddress redis;
  bool cluster = false;
  int drain_sec = 30;
};

class Agent {
 public:
  explicit Agent(AgentSetup setup);
  ~Agent();
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  int run();  // the process's exit code

 private:
  Status lookup(const std::string& id, ModelOrigin* out);
  Status list(std::vector<AgentApi::CatalogEntry>* out);
  void beat();  // composes this loader's state, every 250 ms
  void on_signal(int sig);

  AgentSetup setup_;
  store::TierStore store_;
  cluster::RedisClient catalog_;  // read on the I/O thread: every call has a 2 s deadline
  boost::asio::io_context io_;
  boost::asio::signal_set signals_;
  std::unique_ptr<AgentApi> api_;  // set before the server starts
  RequestServer server_;
  std::unique_ptr<ModelHost> host_;
  std::unique_ptr<publish::LoaderBeat> beat_;  // --cluster: written by the beat's own thread
  boost::asio::steady_timer beat_timer_;
};

}  // namespace uma::agent
