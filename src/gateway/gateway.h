// Gateway: one uma-gw (docs/CLUSTER.md). One I/O thread runs the front end, the proxied requests
// and the agents' KV-event streams; one more thread reads the cluster view from Redis every
// refresh and hands it to the I/O thread (Redis is never on a request's path; while it is down the
// last view stays: fail-static). SIGTERM drains (an orchestrator's stop): /health says 503, the
// requests in flight are carried to their end for up to drain_sec; SIGINT, a second signal or the
// end of the drain stop at once.
//
// Ownership: the members are destroyed in reverse order, the teardown order: the view's reader
// stops first (at the end of run()), then the server (its proxies), the agents' directory, the
// cold loads (their Redis thread), the vocabularies.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "cluster/redis_client.h"
#include "gateway/agent_directory.h"
#include "gateway/cold_loads.h"
#include "gateway/gateway_server.h"
#include "gateway/vocab_cache.h"

namespace uma::gateway {

// What uma-gw's flags come to, checked and derived (gw_main.cc).
struct GatewaySetup {
  GatewayConfig server;
  ColdLoadOptions loads;
  VocabCache::Options vocab;
  cluster::RedisAddress redis;
  std::string redis_text;   // as given, for the log
  std::string policy_name;  // as given, for the log
  std::string model;        // a GGUF whose vocabulary serves models outside the catalog
  std::chrono::milliseconds refresh{200};
  int drain_sec = 30;
};

class Gateway {
 public:
  explicit Gateway(GatewaySetup setup);
  ~Gateway();
  Gateway(const Gateway&) = delete;
  Gateway& operator=(const Gateway&) = delete;

  int run();  // the process's exit code

 private:
  void read_views();  // the Redis reader's thread
  void await_signal();
  void poll_drained();
  void stop_now();

  GatewaySetup setup_;
  boost::asio::io_context io_;
  std::unique_ptr<VocabCache> vocabs_;
  std::unique_ptr<ColdLoads> cold_loads_;
  std::unique_ptr<AgentDirectory> agents_;
  std::unique_ptr<GatewayServer> server_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;  // under mu_: the reader's end
  std::thread refresher_;
  boost::asio::signal_set signals_;
  boost::asio::steady_timer drain_poll_;
  std::chrono::steady_clock::time_point drain_until_{};
};

}  // namespace uma::gateway
