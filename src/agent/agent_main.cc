// uma-agent: one machine's models (docs/AGENT.md). Owns the model store (its DRAM and NVMe tiers,
// the catalog's URLs as the remote tier), runs one umad per loaded model (agent/model_host.h) and
// serves the management API (agent/agent_api.h) on --listen, behind --api-key-file's key.
// Everything after `--` is given to every umad (threads, n_ctx, sessions, --agent flags...).
// SIGTERM: every umad drains for --drain-sec (gateways move its streams to other agents), SIGINT: every
// umad stops at once; SIGKILL 10 s after that, then the agent exits 0.
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <csignal>
#include <filesystem>

#include "agent/agent_api.h"
#include "agent/model_host.h"
#include "publish/loader_beat.h"
#include "cluster/model_catalog.h"
#include "cluster/redis_client.h"
#include "common/secret_file.h"
#include "httpkit/request_server.h"

namespace {

std::string beside_self(const std::string& name) {
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? name : (self.parent_path() / name).string();
}

}  // namespace

int main(int argc, char** argv) {
  using namespace uma;
  CLI::App app{"uma-agent: loads, serves and unloads many models on demand, each in a umad of its own"};
  std::string listen = "127.0.0.1:9100", redis = "127.0.0.1:6379", redis_password_file, redis_user, api_key_file;
  std::string store_dir, keep_alive = "5m";
  std::uint64_t store_nvme_mb = 0, store_dram_mb = 0, models_mb = 0;
  std::int32_t max_models = 0;
  std::int64_t queue_timeout_ms = 30000, start_timeout_ms = 300000;
  int drain_sec = 30;
  bool debug = false, cluster_mode = false;
  std::string agent_id;
  agent::HostConfig hc;
  hc.umad = beside_self("umad");
  hc.run_dir = "/tmp/uma-agent-" + std::to_string(::getpid());
  app.add_option("--listen", listen, "HOST:PORT of the management API (port 0: any free one); models serve on "
                 "HOST too")->envname("UMA_AGENT_LISTEN")->capture_default_str();
  app.add_option("--api-key-file", api_key_file, "the cluster's key (first line): every endpoint but /health needs "
                 "'Authorization: Bearer KEY', the models' own APIs too")->envname("UMA_API_KEY_FILE")->check(CLI::ExistingFile);
  app.add_option("--redis", redis, "the cluster's Redis (the model catalog), HOST:PORT")->envname("UMA_REDIS")->capture_default_str();
  app.add_option("--redis-password-file", redis_password_file, "Redis's password: the first line of this file")
      ->envname("UMA_REDIS_PASSWORD_FILE")->check(CLI::ExistingFile);
  app.add_option("--redis-user", redis_user, "the Redis ACL user the password is for")->envname("UMA_REDIS_USER");
  app.add_option("--store-dir", store_dir, "the NVMe tier: a directory of models")->envname("UMA_STORE_DIR");
  app.add_option("--store-nvme-mb", store_nvme_mb, "--store-dir holds at most this much (LRU; 0: no limit)")->envname("UMA_AGENT_STORE_NVME_MB");
  app.add_option("--store-dram-mb", store_dram_mb, "model images kept in host memory when no umad uses them (LRU)")->envname("UMA_AGENT_STORE_DRAM_MB");
  app.add_option("--models-mb", models_mb, "loaded models' bytes at most (LRU of idle models makes room; 0: no limit)")
      ->envname("UMA_MODELS_MB");
  app.add_option("--max-models", max_models, "loaded models at most (0: no limit)")->check(CLI::Range(0, 1024))->envname("UMA_AGENT_MAX_MODELS");
  app.add_option("--keep-alive", keep_alive, "an idle model is unloaded after this (Ollama's keep_alive: 5m, 30s, "
                 "-1 never); a load may say its own")->capture_default_str()->envname("UMA_AGENT_KEEP_ALIVE");
  app.add_option("--queue-timeout-ms", queue_timeout_ms, "a load waits this long for room")->capture_default_str()->envname("UMA_AGENT_QUEUE_TIMEOUT_MS");
  app.add_option("--start-timeout-ms", start_timeout_ms, "a umad must serve within this of its start")->capture_default_str()->envname("UMA_AGENT_START_TIMEOUT_MS");
  app.add_option("--drain-sec", drain_sec, "SIGTERM drains every umad for up to this long (the gateways move their "
                 "streams to other agents serving the model; the rest end where they are), then the agent exits; 0: "
                 "SIGTERM ends open streams at once (SIGINT always does)")
      ->envname("UMA_AGENT_DRAIN_SEC")->capture_default_str()->check(CLI::Range(0, 86400));
  app.add_flag("--cluster", cluster_mode, "join the cluster at --redis: beat this loader's state (gateways load "
               "models here on demand) and run every umad as a cluster agent (--agent)")->envname("UMA_AGENT_CLUSTER");
  app.add_option("--agent-id", agent_id, "this agent's id in the cluster (default: the --listen address); its "
                 "umads are ID/MODEL")->envname("UMA_AGENT_ID");
  app.add_option("--umad", hc.umad, "the umad binary (default: beside uma-agent)")->envname("UMA_AGENT_UMAD");
  app.add_option("--run-dir", hc.run_dir, "umads' sockets and logs (created)")->envname("UMA_AGENT_RUN_DIR");
  app.add_flag("--standby,!--no-standby", hc.standby, "keep one umad started ahead, its GPU contexts ready: a cold "
               "model's start is its load, not a process's and the driver's start (default on)")
      ->envname("UMA_AGENT_STANDBY");
  app.add_flag("--standby-pins,!--no-standby-pins", hc.standby_pins, "the standby pins the DRAM tier's images (at most "
               "16) while it waits, so the load that takes it is its copy alone; the pages stay locked (default on)")
      ->envname("UMA_AGENT_STANDBY_PINS");
  app.add_flag("--debug", debug, "debug logs")->envname("UMA_AGENT_DEBUG");
  std::vector<std::string> raw(argv + 1, argv + argc);
  if (auto dash = std::find(raw.begin(), raw.end(), "--"); dash != raw.end()) {
    hc.umad_args.assign(dash + 1, raw.end());
    raw.erase(dash, raw.end());
  }
  std::reverse(raw.begin(), raw.end());  // CLI11 parses a reversed vector
  try {
    app.parse(raw);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  spdlog::set_default_logger(spdlog::stderr_color_mt("uma-agent"));
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");
  spdlog::set_level(debug ? spdlog::level::debug : spdlog::level::info);
  std::signal(SIGPIPE, SIG_IGN);

  RequestServerConfig rc;
  rc.log_name = "agent";
  if (const auto colon = listen.rfind(':'); colon != std::string::npos && colon > 0) {
    rc.host = listen.substr(0, colon);
    rc.port = static_cast<std::uint16_t>(std::stoi(listen.substr(colon + 1)));
  } else {
    spdlog::error("--listen wants HOST:PORT, got '{}'", listen);
    return 2;
  }
  if (!api_key_file.empty()) {
    if (Status s = read_secret_file(api_key_file, "API key", &rc.access.api_key); !s.ok()) {
      spdlog::error("{}", s.to_string());
      return 2;
    }
    // The models' own OpenAI APIs take the same key.
    hc.umad_args.insert(hc.umad_args.end(), {"--api-key-file", api_key_file});
  }
  if (Status s = agent::parse_duration_ms(keep_alive, &hc.keep_alive_ms); !s.ok()) {
    spdlog::error("--keep-alive: {}", s.message());
    return 2;
  }
  cluster::RedisAddress ra;
  if (Status s = cluster::redis_address_from_flags(redis, redis_password_file, redis_user, &ra); !s.ok()) {
    spdlog::error("{}", s.to_string());
    return 2;
  }
  hc.http_host = rc.host;
  if (cluster_mode) {
    hc.agent_id = agent_id;  // default: the bound address, once listening
    hc.cluster_args = {"--agent", "--redis", redis};
    if (!redis_password_file.empty()) hc.cluster_args.insert(hc.cluster_args.end(), {"--redis-password-file", redis_password_file});
    if (!redis_user.empty()) hc.cluster_args.insert(hc.cluster_args.end(), {"--redis-user", redis_user});
    // A cold start waits for no calibration unless asked (routing learns from the first requests).
    if (std::find(hc.umad_args.begin(), hc.umad_args.end(), "--agent-calibrate-ms") == hc.umad_args.end()) {
      hc.cluster_args.insert(hc.cluster_args.end(), {"--agent-calibrate-ms", "0"});
    }
  }
  if (std::find(hc.umad_args.begin(), hc.umad_args.end(), "--drain-sec") == hc.umad_args.end()) {
    hc.umad_args.insert(hc.umad_args.end(), {"--drain-sec", std::to_string(drain_sec)});
  }
  hc.budget = {models_mb << 20, max_models};
  hc.queue_timeout = std::chrono::milliseconds(queue_timeout_ms);
  hc.start_timeout = std::chrono::milliseconds(start_timeout_ms);
  std::error_code ec;
  std::filesystem::create_directories(hc.run_dir, ec);
  if (ec) {
    spdlog::error("--run-dir {}: {}", hc.run_dir, ec.message());
    return 2;
  }

  store::TierConfig tc;
  tc.nvme_dir = store_dir;
  tc.nvme_bytes = store_nvme_mb << 20;
  tc.dram_bytes = store_dram_mb << 20;
  store::TierStore store(std::move(tc));
  // The catalog is read on the I/O thread: every call has a 2 s deadline.
  cluster::RedisClient catalog(ra, std::chrono::milliseconds(2000));
  const agent::ModelHost::Lookup lookup = [&catalog](const std::string& id, agent::ModelOrigin* out) {
    cluster::CatalogModel entry;
    std::shared_ptr<const store::Manifest> manifest;
    if (Status s = cluster::catalog_get(catalog, id, &entry, &manifest); !s.ok()) return s;
    out->bytes = manifest->bytes;
    out->source = {std::move(manifest), entry.url};
    return Status();
  };
  const agent::AgentApi::ListCatalog list = [&catalog](std::vector<agent::AgentApi::CatalogEntry>* out) {
    std::vector<cluster::CatalogModel> all;
    if (Status s = cluster::catalog_list(catalog, &all); !s.ok()) return s;
    for (const cluster::CatalogModel& m : all) out->push_back({m.id, m.bytes});
    return Status();
  };

  boost::asio::io_context io;
  boost::asio::signal_set signals(io, SIGINT, SIGTERM);
  std::unique_ptr<agent::AgentApi> api;  // set before the server starts
  RequestServer server(io, rc, [&api](const HttpExchangePtr& ex) { api->handle(ex); });
  if (Status s = server.listen(); !s.ok()) {
    spdlog::error("{}", s.to_string());
    return 1;
  }
  if (cluster_mode && agent_id.empty()) hc.agent_id = rc.host + ":" + std::to_string(server.port());
  auto host = std::make_unique<agent::ModelHost>(io, hc, &store, lookup);
  api = std::make_unique<agent::AgentApi>(*host, store, lookup, list);
  server.start();
  host->start();
  // --cluster: this loader's state, composed on the I/O thread, written by the beat's thread.
  std::unique_ptr<cluster::LoaderBeat> beat;
  boost::asio::steady_timer beat_timer(io);
  std::function<void()> compose;
  if (cluster_mode) {
    beat = std::make_unique<cluster::LoaderBeat>(ra);
    compose = [&] {
      cluster::LoaderState l;
      l.id = host->config().agent_id;
      l.address = "http://" + rc.host + ":" + std::to_string(server.port());
      for (const store::ModelTierInfo& t : store.list()) {  // NVMe files included
        if (t.tier == store::Tier::kDram || t.tier == store::Tier::kNvme) l.models.push_back({t.id, std::string(store::tier_name(t.tier))});
      }
      for (const agent::ModelInfo& m : host->models()) {
        std::erase_if(l.models, [&](const cluster::LoaderModel& x) { return x.name == m.id; });
        l.models.push_back({m.id, agent::model_state_name(m.state), m.bytes, m.in_use});
      }
      l.budget_bytes = host->config().budget.bytes;
      l.held_bytes = host->held_bytes();
      l.idle_bytes = host->idle_bytes();
      // Fills as this agent's loads measured them; before one from a tier, its store's own fills.
      const auto rate = [&](store::Tier t) { return host->fill_rate(t) > 0 ? host->fill_rate(t) : store.rate_bytes_s(t); };
      l.start_s = host->start_s();
      l.stop_s = host->stop_s();
      l.dram_bytes_s = rate(store::Tier::kDram);
      l.nvme_bytes_s = rate(store::Tier::kNvme);
      l.remote_bytes_s = rate(store::Tier::kRemote);
      l.queue_bytes = store.queued_bytes();
      beat->publish(std::move(l));
      beat_timer.expires_after(std::chrono::milliseconds(250));
      beat_timer.async_wait([&](const boost::system::error_code& e) {
        if (!e) compose();
      });
    };
    compose();
    beat->start();
  }
  spdlog::info("agent listening on {}:{} (models up to {} MiB and {} at once, keep_alive {} ms, key {}, umads log to {})",
               rc.host, server.port(), models_mb, max_models, hc.keep_alive_ms, rc.access.api_key.empty() ? "none" : "required",
               hc.run_dir);
  signals.async_wait([&](const boost::system::error_code& e, int sig) {
    if (e) return;
    spdlog::info("signal {}: {} every model", sig, sig == SIGTERM && drain_sec > 0 ? "draining" : "stopping");
    server.stop();
    beat_timer.cancel();
    if (beat) beat->stop();  // gateways stop choosing this loader at once
    const bool drain = sig == SIGTERM && drain_sec > 0;
    host->stop(std::chrono::seconds((drain ? drain_sec : 0) + 10), [&io] { io.stop(); }, drain);
  });
  io.run();
  store.stop();  // fills the host may wait for end here
  api.reset();
  host.reset();
  spdlog::info("stopped");
  return 0;
}
