// KvEventServer: umad --agent's KV-event stream. Gateways subscribe with
// `GET /kv-events` (plain HTTP/1.1 on its own port, advertised in the agent's heartbeat) and read
// an endless text/event-stream: first a snapshot of every prefix block the agent holds, then a
// delta whenever blocks were stored or evicted or the load changed, coalesced over `flush` (50 ms:
// one event per window, however many changes), and a `: ping` comment every `ping` so a reader can
// tell a quiet agent from a hung one. The stream never ends while the agent runs: a gateway that
// sees it break (EOF, reset) knows the agent is gone, at once, with no timeout to wait for (a
// killed process's sockets are closed by its kernel).
//
// Served by httpkit's RequestServer. Caps: at most max_subscribers connections; a request's
// header of at most 8 KiB; a subscriber that does not read is dropped at max_tx_bytes unsent (it
// reconnects and gets a fresh snapshot). Anything but `GET /kv-events` is a 404.
//
// Threading: everything runs on the I/O thread of `io` (the daemon's); the journal is fed by the
// compute thread and is thread-safe. Ownership: the server owns its connections; stop() closes
// them all before the server goes.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "cluster/kv_events.h"
#include "common/status.h"
#include "metrics/server_metrics.h"
#include "httpkit/request_server.h"

namespace uma::publish {

struct KvEventConfig {
  std::string host = "127.0.0.1";
  std::uint16_t port = 0;  // 0: any free port (see port())
  std::string boot_id;
  std::int32_t block = 32;
  std::chrono::milliseconds flush{50};
  std::chrono::milliseconds ping{500};
  std::int32_t max_subscribers = 64;
  std::size_t max_tx_bytes = std::size_t{4} << 20;
};

class KvEventServer final {
 public:
  KvEventServer(boost::asio::io_context& io, KvEventConfig config, cluster::BlockJournal& journal, const ServerMetrics& metrics);
  ~KvEventServer();

  Status listen() { return server_.listen(); }
  std::uint16_t port() const { return server_.port(); }
  void start(std::string boot_id);  // the heartbeat's: a snapshot names the agent's process
  void stop();  // closes the listener and every stream
  // The agent is stopping gracefully: every stream gets a last event saying `draining` (the
  // gateways route around it and move their streams off it) and ends; no new subscriber is taken.
  void drain();
  std::size_t subscribers() const { return subscribers_.size(); }

 private:
  void handle(const HttpExchangePtr& ex);
  cluster::AgentLoad load() const;
  void tick();       // every flush: publish what changed
  void publish(const cluster::BlockJournal::Delta& d, const cluster::AgentLoad& load);
  void arm_timer();

  KvEventConfig config_;
  cluster::BlockJournal& journal_;
  const ServerMetrics& metrics_;
  RequestServer server_;
  boost::asio::steady_timer timer_;
  std::vector<HttpExchangePtr> subscribers_;  // streaming
  cluster::AgentLoad last_load_;
  std::chrono::steady_clock::time_point last_sent_{};
  bool stopped_ = true;
};

}  // namespace uma::publish
