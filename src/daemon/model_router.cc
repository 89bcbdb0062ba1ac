#include "daemon/model_router.h"

#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>

#include "agent/agent_api.h"
#include "agent/model_front.h"
#include "agent/model_host.h"
#include "httpkit/request_server.h"
#include "store/tier_store.h"
#include "webui/webui.h"

namespace uma {

namespace fs = std::filesystem;

std::vector<std::string> model_umad_args(int argc, char** argv) {
  static const char* kRouterFlags[] = {"-m", "--model", "--models-dir", "--max-models", "--models-mb", "--keep-alive",
                                       "--http", "-s", "--socket", "--alias", "--status-fd"};
  const auto is_router_flag = [](std::string_view a) {
    return std::any_of(std::begin(kRouterFlags), std::end(kRouterFlags), [&](const char* f) { return a == f; });
  };
  std::vector<std::string> out;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (is_router_flag(a)) {
      if (a != "-m" && a != "--model") {
        ++i;  // its value
        continue;
      }
      while (i + 1 < argc && argv[i + 1][0] != '-') ++i;  // --model may take several (CLI11 reads on to the next flag)
      continue;
    }
    if (a.starts_with("--") && a.find('=') != std::string_view::npos && is_router_flag(a.substr(0, a.find('=')))) continue;
    out.emplace_back(a);
  }
  return out;
}

namespace {

// Each model's id is its file's name without ".gguf"; a name that cannot be one (the id names the
// model's log and socket files) is skipped and said.
Status collect_models(const DaemonConfig& cfg, std::map<std::string, std::string>* files) {
  std::vector<fs::path> paths;
  for (const std::string& m : cfg.models) paths.emplace_back(m);
  if (!cfg.models_dir.empty()) {
    std::error_code ec;
    std::vector<fs::path> found;
    for (const fs::directory_entry& e : fs::directory_iterator(cfg.models_dir, ec)) {
      if (e.path().extension() == ".gguf" && e.is_regular_file(ec)) found.push_back(e.path());
    }
    if (ec) return {ErrorCode::kIo, "--models-dir " + cfg.models_dir + ": " + ec.message()};
    std::sort(found.begin(), found.end());
    paths.insert(paths.end(), found.begin(), found.end());
  }
  for (const fs::path& p : paths) {
    std::string id = p.filename().string();
    if (id.ends_with(".gguf")) id.resize(id.size() - 5);
    if (!store::TierStore::valid_id(id)) {
      spdlog::warn("{}: skipped (a model's name is its file's: [A-Za-z0-9._-], 1-128 characters)", p.string());
      continue;
    }
    if (auto [it, fresh] = files->emplace(id, fs::absolute(p).string()); !fresh && it->second != fs::absolute(p).string()) {
      return {ErrorCode::kInvalidArgument, "two models are named '" + id + "': " + it->second + " and " + p.string()};
    }
  }
  if (files->empty()) return {ErrorCode::kInvalidArgument, "no models: --models-dir holds no *.gguf"};
  return {};
}

// The models' umads: this binary, the router's flags less its own, their limits and run folder.
// 0, or the exit code (said).
int host_config(const DaemonConfig& cfg, int argc, char** argv, agent::HostConfig* hc) {
  std::error_code ec;
  hc->umad = fs::read_symlink("/proc/self/exe", ec).string();
  if (ec) {
    spdlog::error("cannot find this umad's own binary: {}", ec.message());
    return 1;
  }
  hc->umad_args = model_umad_args(argc, argv);
  // The models' umads inherit the environment: the router's own variables would make each of them
  // a router (UMA_MODELS_DIR) or name a model or a port of the router's.
  for (const char* v : {"UMA_MODEL", "UMA_MODELS_DIR", "UMA_MAX_MODELS", "UMA_MODELS_MB", "UMA_KEEP_ALIVE", "UMA_HTTP",
                        "UMA_SOCK", "UMA_ALIAS"}) {
    ::unsetenv(v);
  }
  hc->http_host = "127.0.0.1";
  hc->budget.bytes = cfg.models_mb << 20;
  hc->budget.models = cfg.max_models;
  if (Status st = agent::parse_duration_ms(cfg.keep_alive, &hc->keep_alive_ms); !st.ok()) {
    spdlog::error("--keep-alive: {}", st.message());
    return 2;
  }
  char run_dir[] = "/tmp/umad-models-XXXXXX";
  if (::mkdtemp(run_dir) == nullptr) {
    spdlog::error("cannot make a directory for the models' logs: {}", std::strerror(errno));
    return 1;
  }
  hc->run_dir = run_dir;
  return 0;
}

// The router's HTTP server: umad's --http, key, caps and timeout.
RequestServerConfig router_server_config(const DaemonConfig& cfg) {
  RequestServerConfig rc;
  rc.host = cfg.http.host;
  rc.port = cfg.http.port;
  rc.access.api_key = cfg.http.api_key;
  if (cfg.http.webui) rc.access.open_paths.insert(rc.access.open_paths.end(), std::begin(webui::kPaths), std::end(webui::kPaths));
  rc.max_connections = cfg.http.max_connections;
  rc.limits.max_body_bytes = cfg.http.max_body_bytes;
  rc.max_tx_bytes = cfg.http.max_tx_bytes;
  rc.timeout = std::chrono::seconds(cfg.http.timeout_sec);
  rc.log_name = "router";
  return rc;
}

}  // namespace

int run_model_router(const DaemonConfig& cfg, int argc, char** argv) {
  std::map<std::string, std::string> files;
  if (Status st = collect_models(cfg, &files); !st.ok()) {
    spdlog::error("{}", st.to_string());
    return 2;
  }
  agent::HostConfig hc;
  if (int code = host_config(cfg, argc, argv, &hc)) return code;
  std::error_code ec;
  std::vector<agent::FrontModel> models;
  for (const auto& [id, path] : files) models.push_back({id, static_cast<std::uint64_t>(fs::file_size(path, ec))});
  const agent::ModelHost::Lookup lookup = [&files](const std::string& id, agent::ModelOrigin* out) {
    const auto it = files.find(id);
    if (it == files.end()) return Status(ErrorCode::kNotFound, "The model '" + id + "' does not exist", "model");
    std::error_code size_ec;
    out->file = it->second;
    out->bytes = static_cast<std::uint64_t>(fs::file_size(it->second, size_ec));
    if (size_ec) return Status(ErrorCode::kIo, it->second + ": " + size_ec.message());
    return Status();
  };

  boost::asio::io_context io;
  boost::asio::signal_set signals(io, SIGINT, SIGTERM);
  std::unique_ptr<agent::ModelFront> front;  // set before the server starts
  RequestServer server(io, router_server_config(cfg), [&front](const HttpExchangePtr& ex) { front->handle(ex); });
  if (Status st = server.listen(); !st.ok()) {
    spdlog::error("{}", st.to_string());
    return 1;
  }
  agent::ModelHost host(io, hc, nullptr, lookup);
  front = std::make_unique<agent::ModelFront>(io, host, models, cfg.http.api_key, cfg.http.webui);
  server.start();
  host.start();
  front->start();
  spdlog::info("http listening on {}:{}: {} models from {} (at most {} loaded{}, keep_alive {}; their logs in {})",
               cfg.http.host, server.port(), models.size(), cfg.models_dir.empty() ? "--model" : cfg.models_dir,
               cfg.max_models, cfg.models_mb > 0 ? ", " + std::to_string(cfg.models_mb) + " MiB" : "", cfg.keep_alive,
               hc.run_dir);
  signals.async_wait([&](const boost::system::error_code& e, int sig) {
    if (e) return;
    spdlog::info("signal {}: stopping every model", sig);
    server.stop();
    front->stop();
    host.stop(std::chrono::seconds(10), [&io] { io.stop(); });
  });
  io.run();
  front.reset();
  fs::remove_all(hc.run_dir, ec);
  spdlog::info("stopped");
  return 0;
}

}  // namespace uma
