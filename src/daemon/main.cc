// umad: wires the layers together. The main thread runs the I/O loop (UdsServer); a second thread
// owns the model and runs the scheduler (ComputeThread). SIGINT/SIGTERM: stop accepting, end open
// streams with an error line, free KV, remove the socket file, exit 0.
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <csignal>
#include <cstdio>

#include "daemon/config.h"
#include "ipc/uds_server.h"
#include "runtime/llama_runtime.h"
#include "sched/compute_thread.h"
#include "sched/scheduler.h"

int main(int argc, char** argv) {
  using namespace uma;
  DaemonConfig cfg;
  int exit_code = 0;
  Status st = parse_daemon_config(argc, argv, cfg, &exit_code);
  if (exit_code >= 0) return exit_code;

  spdlog::set_default_logger(spdlog::stderr_color_mt("umad"));
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");
  spdlog::set_level(cfg.debug ? spdlog::level::debug : spdlog::level::info);
  std::signal(SIGPIPE, SIG_IGN);

  boost::asio::io_context io;
  // Signals are caught from here on; one that arrives during the (possibly long) model load is
  // queued and handled as soon as the loop runs, so the shutdown is always the graceful one.
  boost::asio::signal_set signals(io, SIGINT, SIGTERM);
  ServerMetrics metrics;
  std::unique_ptr<ComputeThread> compute;
  UdsServer server(io, cfg.server, metrics, [&compute](WorkItem item) { compute->submit(std::move(item)); });
  // Claim the socket before the (slow) model load, so a second daemon fails fast.
  if (st = server.listen(); !st.ok()) {
    spdlog::error("{}", st.to_string());
    return 1;
  }
  std::unique_ptr<LlamaRuntime> runtime = LlamaRuntime::open(cfg.runtime, &st);
  if (!runtime) {
    spdlog::error("{}", st.to_string());
    return 1;
  }
  spdlog::info("model: {}", runtime->describe());
  Scheduler scheduler(*runtime, metrics, cfg.scheduler);
  compute = std::make_unique<ComputeThread>(scheduler, server);

  signals.async_wait([&](const boost::system::error_code& ec, int sig) {
    if (ec) return;
    spdlog::info("signal {}: shutting down", sig);
    server.begin_shutdown();
    compute->request_stop();
  });
  compute->start([&] {
    // Runs on the compute thread after its last events were delivered; hop to the I/O thread.
    boost::asio::post(io, [&] { server.finish_shutdown(std::chrono::seconds(2), [&] { io.stop(); }); });
  });
  server.start();
  spdlog::info("listening on {} ({} protocol, max sessions {}, n_ctx {})", cfg.server.socket_path,
               cfg.server.protocol == ProtocolKind::kJson ? "json" : "newline", cfg.server.max_sessions, cfg.runtime.n_ctx);
  io.run();
  compute->join();
  spdlog::info("stopped: {} tokens generated, {} requests", metrics.tokens_generated_total.load(),
               metrics.requests_total.load());
  return 0;
}
