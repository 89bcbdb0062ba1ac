// umad: one model's server (daemon/daemon.h), or several models' router behind one port
// (daemon/model_router.h), or, started by uma-agent, a standby that becomes one of those
// (daemon/standby.h).
#include <csignal>
#include <string>
#include <vector>

#include "common/program_log.h"
#include "daemon/compute_spin.h"
#include "daemon/config.h"
#include "daemon/daemon.h"
#include "daemon/model_router.h"
#include "daemon/standby.h"

int main(int argc, char** argv) {
  using namespace uma;
  exec_with_compute_spin(argv);
  start_program_log("umad");
  // A standby readies the GPUs, then runs the command line handed to it.
  std::vector<std::string> handed;
  std::vector<char*> handed_argv;
  if (is_standby(argc, argv)) {
    if (Status s = await_handover(argc, argv, &handed); !s.ok()) {
      spdlog::error("{}", s.to_string());
      return 2;
    }
    if (handed.empty()) return 0;
    for (std::string& a : handed) handed_argv.push_back(a.data());
    handed_argv.push_back(nullptr);
    argc = static_cast<int>(handed.size());
    argv = handed_argv.data();
  }
  DaemonConfig cfg;
  int exit_code = 0;
  (void)parse_daemon_config(argc, argv, cfg, &exit_code);
  if (exit_code >= 0) return exit_code;
  spdlog::set_level(cfg.trace ? spdlog::level::trace : cfg.debug ? spdlog::level::debug : spdlog::level::info);
  std::signal(SIGPIPE, SIG_IGN);
  if (cfg.router()) return run_model_router(cfg, argc, argv);
  return Daemon(std::move(cfg)).run();
}
