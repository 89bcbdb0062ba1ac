// Daemon: one umad serving one model (a router of several is daemon/model_router.h). The main
// thread runs the I/O loop: one server (StreamServer) with a listener per front end (UdsServer,
// and HttpServer with --http); prompts become tokens in the prepare stage; a second thread owns
// the model and runs the scheduler (ComputeThread), whose events go back to the server.
//
// run(): claims the socket and the HTTP port before the (slow) model load, so a second daemon
// fails fast; loads the model (with HTTP, the loop runs meanwhile so /health says 503); builds
// the scheduler, its drafter and the chat templates; joins the cluster as an agent when asked;
// serves until SIGINT/SIGTERM (or the supervising agent's unload): stop accepting, end open
// streams with an error, free KV, remove the socket file, exit 0. SIGTERM with --drain-sec drains
// first: no new requests, those in flight end (or move, through their gateways).
//
// Ownership: the members are declared in the order they are made and destroyed in reverse, which
// is the teardown order: the cluster links and the drafter before the scheduler, the scheduler
// before the runtime it decodes with, the runtime before the servers whose sessions it served.
// The compute thread is joined, and the prepare stage (which tokenizes with the runtime) reset,
// at the end of run(), before any of that.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>

#include <chrono>
#include <memory>
#include <string>

#include "cluster/kv_events.h"
#include "daemon/catalog_model.h"
#include "daemon/config.h"
#include "daemon/supervisor_link.h"
#include "http/http_server.h"
#include "ipc/uds_server.h"
#include "metrics/server_metrics.h"
#include "net/session_slots.h"
#include "net/stream_server.h"
#include "runtime/draft_model.h"
#include "runtime/image_encoder.h"
#include "runtime/llama_runtime.h"
#include "sched/compute_thread.h"
#include "sched/cpu_meter.h"
#include "sched/scheduler.h"
#include "serve/prepare_stage.h"

namespace uma {

namespace publish {
class AgentHeartbeat;
class KvEventServer;
}  // namespace publish

class Daemon {
 public:
  explicit Daemon(DaemonConfig cfg);
  ~Daemon();
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  int run();  // the process's exit code

 private:
  int listen();
  int load_model();
  int build_scheduler();
  int set_up_chat();
  void watch_signals();
  int join_cluster();
  void shut_down(const std::string& why);
  void drain(int sig);
  void poll_drained();
  void await_signal();
  void await_unload();

  DaemonConfig cfg_;
  boost::asio::io_context io_;
  // Signals are caught from the start; one that arrives during the (possibly long) model load is
  // queued and handled as soon as the loop runs, so the shutdown is always the graceful one.
  boost::asio::signal_set signals_;
  ServerMetrics metrics_;
  std::unique_ptr<ComputeThread> compute_;
  // Between the front ends and the compute thread: text prompts become tokens. After the compute
  // thread: it goes first, and never submits to a gone one.
  std::unique_ptr<PrepareStage> prepare_;
  SessionSlots slots_;      // one admission for every front end: a slot per request in flight
  StreamServer serving_;    // every front end's connections, its slots, the compute thread's events
  UdsServer server_;
  std::unique_ptr<HttpServer> http_;
  // The cores this process may use and what others take of them (read on the compute thread).
  ProcCpuMeter cpu_meter_;
  std::unique_ptr<LlamaRuntime> runtime_;
  std::unique_ptr<ImageEncoder> images_;  // --mmproj: the prepare stage's (reset with it, before the runtime)
  std::unique_ptr<CatalogModel> catalog_model_;  // --model-id: the store behind the model's image
  std::string served_name_;
  // An agent publishes the prefix blocks it holds: the journal hears the prefix index from the
  // compute thread; the stream's server runs on the I/O thread.
  cluster::BlockJournal block_journal_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<DraftModel> draft_;
  std::unique_ptr<publish::KvEventServer> kv_events_;
  std::unique_ptr<publish::AgentHeartbeat> agent_;
  SupervisorLink supervisor_;
  boost::asio::steady_timer drain_poll_;
  std::chrono::steady_clock::time_point drain_until_{};
  bool draining_ = false;
  bool stopping_ = false;
  boost::asio::signal_set unload_signal_;  // SIGUSR1 from the supervising agent
};

}  // namespace uma
