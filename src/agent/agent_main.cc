// uma-agent: one machine's models (agent/agent.h, docs/AGENT.md). Everything after `--` is given
// to every umad (threads, n_ctx, sessions, --agent flags...). Its flags are declared in groups,
// each with its UMA_* twin, then checked and derived apart (derive()).
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <csignal>
#include <filesystem>

#include "agent/agent.h"
#include "cluster/redis_flags.h"
#include "common/program_log.h"
#include "common/secret_file.h"

namespace {

using namespace uma;
using namespace uma::agent;

std::string beside_self(const std::string& name) {
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? name : (self.parent_path() / name).string();
}

// The flags as given; derive() turns them into an AgentSetup.
struct AgentFlags {
  std::string listen = "127.0.0.1:9100", api_key_file, store_dir, keep_alive = "5m", agent_id;
  cluster::RedisFlags redis;
  std::uint64_t store_nvme_mb = 0, store_dram_mb = 0, models_mb = 0;
  std::int32_t max_models = 0;
  std::int64_t queue_timeout_ms = 30000, start_timeout_ms = 300000;
  bool debug = false;
  AgentSetup setup;
};

void add_api_flags(CLI::App& app, AgentFlags& f) {
  const char* group = "Management API";
  app.add_option("--listen", f.listen, "HOST:PORT of the management API (port 0: any free one); models serve on "
                 "HOST too")->envname("UMA_AGENT_LISTEN")->capture_default_str()->group(group);
  app.add_option("--api-key-file", f.api_key_file, "the cluster's key (first line): every endpoint but /health needs "
                 "'Authorization: Bearer KEY', the models' own APIs too")->envname("UMA_API_KEY_FILE")->check(CLI::ExistingFile)
      ->group(group);
  app.add_option("--drain-sec", f.setup.drain_sec, "SIGTERM drains every umad for up to this long (the gateways move their "
                 "streams to other agents serving the model; the rest end where they are), then the agent exits; 0: "
                 "SIGTERM ends open streams at once (SIGINT always does)")
      ->envname("UMA_AGENT_DRAIN_SEC")->capture_default_str()->check(CLI::Range(0, 86400))->group(group);
}

void add_store_flags(CLI::App& app, AgentFlags& f) {
  const char* group = "Model store";
  app.add_option("--store-dir", f.store_dir, "the NVMe tier: a directory of models")->envname("UMA_STORE_DIR")->group(group);
  app.add_option("--store-nvme-mb", f.store_nvme_mb, "--store-dir holds at most this much (LRU; 0: no limit)")
      ->envname("UMA_AGENT_STORE_NVME_MB")->group(group);
  app.add_option("--store-dram-mb", f.store_dram_mb, "model images kept in host memory when no umad uses them (LRU)")
      ->envname("UMA_AGENT_STORE_DRAM_MB")->group(group);
}

void add_model_flags(CLI::App& app, AgentFlags& f) {
  HostConfig& hc = f.setup.host;
  const char* group = "Models and their umads";
  app.add_option("--models-mb", f.models_mb, "loaded models' bytes at most (LRU of idle models makes room; 0: no limit)")
      ->envname("UMA_MODELS_MB")->group(group);
  app.add_option("--max-models", f.max_models, "loaded models at most (0: no limit)")->check(CLI::Range(0, 1024))
      ->envname("UMA_AGENT_MAX_MODELS")->group(group);
  app.add_option("--keep-alive", f.keep_alive, "an idle model is unloaded after this (Ollama's keep_alive: 5m, 30s, "
                 "-1 never); a load may say its own")->capture_default_str()->envname("UMA_AGENT_KEEP_ALIVE")->group(group);
  app.add_option("--queue-timeout-ms", f.queue_timeout_ms, "a load waits this long for room")->capture_default_str()
      ->envname("UMA_AGENT_QUEUE_TIMEOUT_MS")->group(group);
  app.add_option("--start-timeout-ms", f.start_timeout_ms, "a umad must serve within this of its start")->capture_default_str()
      ->envname("UMA_AGENT_START_TIMEOUT_MS")->group(group);
  app.add_option("--umad", hc.umad, "the umad binary (default: beside uma-agent)")->envname("UMA_AGENT_UMAD")->group(group);
  app.add_option("--run-dir", hc.run_dir, "umads' sockets and logs (created)")->envname("UMA_AGENT_RUN_DIR")->group(group);
  app.add_flag("--standby,!--no-standby", hc.standby, "keep one umad started ahead, its GPU contexts ready: a cold "
               "model's start is its load, not a process's and the driver's start (default on)")
      ->envname("UMA_AGENT_STANDBY")->group(group);
  app.add_flag("--standby-pins,!--no-standby-pins", hc.standby_pins, "the standby pins the DRAM tier's images (at most "
               "16) while it waits, so the load that takes it is its copy alone; the pages stay locked (default on)")
      ->envname("UMA_AGENT_STANDBY_PINS")->group(group);
}

void add_cluster_flags(CLI::App& app, AgentFlags& f) {
  cluster::add_redis_flags(app, f.redis, "the cluster's Redis (the model catalog), HOST:PORT");
  app.add_flag("--cluster", f.setup.cluster, "join the cluster at --redis: beat this loader's state (gateways load "
               "models here on demand) and run every umad as a cluster agent (--agent)")
      ->envname("UMA_AGENT_CLUSTER")->group(cluster::kRedisFlagGroup);
  app.add_option("--agent-id", f.agent_id, "this agent's id in the cluster (default: the --listen address); its "
                 "umads are ID/MODEL")->envname("UMA_AGENT_ID")->group(cluster::kRedisFlagGroup);
}

// Checks what the parser cannot and derives the setup; 0, or the exit code (logged).
int derive(AgentFlags& f) {
  AgentSetup& s = f.setup;
  HostConfig& hc = s.host;
  const auto fail = [](const std::string& why) {
    spdlog::error("{}", why);
    return 2;
  };
  const auto colon = f.listen.rfind(':');
  if (colon == std::string::npos || colon == 0) return fail("--listen wants HOST:PORT, got '" + f.listen + "'");
  s.server.log_name = "agent";
  s.server.host = f.listen.substr(0, colon);
  s.server.port = static_cast<std::uint16_t>(std::stoi(f.listen.substr(colon + 1)));
  if (!f.api_key_file.empty()) {
    if (Status st = read_secret_file(f.api_key_file, "API key", &s.server.access.api_key); !st.ok()) return fail(st.to_string());
    // The models' own OpenAI APIs take the same key.
    hc.umad_args.insert(hc.umad_args.end(), {"--api-key-file", f.api_key_file});
  }
  if (Status st = parse_duration_ms(f.keep_alive, &hc.keep_alive_ms); !st.ok()) return fail("--keep-alive: " + st.message());
  if (Status st = f.redis.resolve(&s.redis); !st.ok()) return fail(st.to_string());
  hc.http_host = s.server.host;
  if (s.cluster) {
    hc.agent_id = f.agent_id;  // default: the bound address, once listening
    hc.cluster_args = {"--agent", "--redis", f.redis.address};
    if (!f.redis.password_file.empty()) hc.cluster_args.insert(hc.cluster_args.end(), {"--redis-password-file", f.redis.password_file});
    if (!f.redis.user.empty()) hc.cluster_args.insert(hc.cluster_args.end(), {"--redis-user", f.redis.user});
    // A cold start waits for no calibration unless asked (routing learns from the first requests).
    if (std::find(hc.umad_args.begin(), hc.umad_args.end(), "--agent-calibrate-ms") == hc.umad_args.end()) {
      hc.cluster_args.insert(hc.cluster_args.end(), {"--agent-calibrate-ms", "0"});
    }
  }
  if (std::find(hc.umad_args.begin(), hc.umad_args.end(), "--drain-sec") == hc.umad_args.end()) {
    hc.umad_args.insert(hc.umad_args.end(), {"--drain-sec", std::to_string(s.drain_sec)});
  }
  hc.budget = {f.models_mb << 20, f.max_models};
  hc.queue_timeout = std::chrono::milliseconds(f.queue_timeout_ms);
  hc.start_timeout = std::chrono::milliseconds(f.start_timeout_ms);
  std::error_code ec;
  std::filesystem::create_directories(hc.run_dir, ec);
  if (ec) return fail("--run-dir " + hc.run_dir + ": " + ec.message());
  s.store.nvme_dir = f.store_dir;
  s.store.nvme_bytes = f.store_nvme_mb << 20;
  s.store.dram_bytes = f.store_dram_mb << 20;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"uma-agent: loads, serves and unloads many models on demand, each in a umad of its own"};
  AgentFlags flags;
  flags.setup.host.umad = beside_self("umad");
  flags.setup.host.run_dir = "/tmp/uma-agent-" + std::to_string(::getpid());
  add_api_flags(app, flags);
  add_store_flags(app, flags);
  add_model_flags(app, flags);
  add_cluster_flags(app, flags);
  app.add_flag("--debug", flags.debug, "debug logs")->envname("UMA_AGENT_DEBUG");
  std::vector<std::string> raw(argv + 1, argv + argc);
  if (auto dash = std::find(raw.begin(), raw.end(), "--"); dash != raw.end()) {
    flags.setup.host.umad_args.assign(dash + 1, raw.end());
    raw.erase(dash, raw.end());
  }
  std::reverse(raw.begin(), raw.end());  // CLI11 parses a reversed vector
  try {
    app.parse(raw);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  start_program_log("uma-agent", flags.debug ? spdlog::level::debug : spdlog::level::info);
  std::signal(SIGPIPE, SIG_IGN);
  if (int code = derive(flags)) return code;
  return Agent(std::move(flags.setup)).run();
}
