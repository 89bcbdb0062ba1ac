// uma-gw: the cluster's stateless OpenAI gateway (gateway/gateway.h, docs/CLUSTER.md). Its flags
// are declared in groups, each with its UMA_* twin, then checked and derived apart (derive()).
#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <csignal>
#include <iostream>
#include <random>

#include "chat/chat_templates.h"
#include "cluster/redis_flags.h"
#include "common/program_log.h"
#include "common/secret_file.h"
#include "gateway/gateway.h"

namespace {

using namespace uma;
using namespace uma::gateway;

// The flags as given; derive() turns them into a GatewaySetup.
struct GatewayFlags {
  std::string listen = "127.0.0.1:8000";
  cluster::RedisFlags redis;
  std::string chat_template, policy = "predicted", load_policy = "predicted";
  std::string agent_key_file, client_key_file;
  std::int64_t load_lock_ms = ColdLoadOptions{}.lock_ttl.count();
  int refresh_ms = 200;
  int max_body_kib = 32 * 1024;  // a few images of several MiB each, as umad with a projector takes
  bool agents_tokenize = false, no_webui = false, debug = false;
  GatewaySetup setup;
};

void add_http_flags(CLI::App& app, GatewayFlags& f) {
  GatewayConfig& gc = f.setup.server;
  const char* group = "HTTP";
  app.add_option("--listen", f.listen, "HOST:PORT to serve on (port 0: any free one)")->envname("UMA_GW_LISTEN")->capture_default_str()->group(group);
  app.add_option("--max-connections", gc.max_connections)->capture_default_str()->envname("UMA_GW_MAX_CONNECTIONS")->group(group);
  app.add_option("--http-max-body-kib", f.max_body_kib, "largest request body (KiB; larger: 413): room for images, as umad's "
                 "default with --mmproj")->capture_default_str()->check(CLI::Range(64, 1 << 20))
      ->envname("UMA_GW_HTTP_MAX_BODY_KIB")->group(group);
  app.add_option("--drain-sec", f.setup.drain_sec, "SIGTERM: /health says 503, no new connections, the requests in flight are "
                 "carried to their end for up to this long, then the gateway exits (0: at once; a second signal too)")
      ->envname("UMA_GW_DRAIN_SEC")->capture_default_str()->check(CLI::Range(0, 86400))->group(group);
  app.add_option("--api-key", gc.api_key, "what clients must send: Authorization: Bearer KEY or x-api-key: KEY "
                 "(GET /health is open)")->envname("UMA_GW_API_KEY")->group(group);
  app.add_option("--api-key-file", f.client_key_file, "the same, from the first line of a file")->check(CLI::ExistingFile)
      ->envname("UMA_GW_API_KEY_FILE")->group(group);
  app.add_flag("--no-webui", f.no_webui, "no web page (a chat and the cluster's status) at GET /")->envname("UMA_GW_NO_WEBUI")->group(group);
  app.add_option("--cors-origin", gc.cors_origin, "browsers may call from this origin ('*': any); preflights answered")
      ->envname("UMA_GW_CORS_ORIGIN")->group(group);
  app.add_flag("--strict-fields", gc.limits.strict_fields, "a request field umad does not know is a 400 (by default "
               "it is ignored, as the agents do)")->envname("UMA_GW_STRICT_FIELDS")->group(group);
}

void add_model_flags(CLI::App& app, GatewayFlags& f) {
  const char* group = "Models (vocabularies and templates)";
  app.add_option("--model", f.setup.model, "a GGUF whose vocabulary and chat template serve models the catalog does not have "
                 "(agents started with a file of their own; weights are not read). Catalog models bring their own")
      ->envname("UMA_MODEL")->group(group);
  app.add_option("--chat-template", f.chat_template, "as umad's --chat-template, for every model (the agents' must be the same)")
      ->envname("UMA_GW_CHAT_TEMPLATE")->group(group);
  app.add_flag("--agents-tokenize", f.agents_tokenize, "agents tokenize each prompt again instead of running the tokens "
               "the gateway computed to route it (for agents whose template differs from the gateway's)")
      ->envname("UMA_GW_AGENTS_TOKENIZE")->group(group);
  app.add_option("--vocab-cache", f.setup.vocab.capacity, "catalog vocabularies kept loaded at most (least recently used out first)")
      ->capture_default_str()->check(CLI::Range(1, 1024))->envname("UMA_GW_VOCAB_CACHE")->group(group);
  app.add_option("--tokenize-threads", f.setup.server.tokenize_threads, "threads that tokenize prompts, off the I/O thread")
      ->capture_default_str()->check(CLI::Range(1, 64))->envname("UMA_GW_TOKENIZE_THREADS")->group(group);
}

void add_routing_flags(CLI::App& app, GatewayFlags& f) {
  GatewayConfig& gc = f.setup.server;
  const char* group = "Routing";
  app.add_option("--policy", f.policy, "routing: predicted | seed | round-robin | least-loaded")->capture_default_str()
      ->envname("UMA_GW_POLICY")->group(group);
  app.add_option("--refresh-ms", f.refresh_ms, "read the cluster view from Redis this often")->capture_default_str()
      ->check(CLI::Range(10, 10000))->envname("UMA_GW_REFRESH_MS")->group(group);
  app.add_option("--max-attempts", gc.max_attempts, "dispatches of a request before its first byte")->capture_default_str()
      ->check(CLI::Range(1, 10))->envname("UMA_GW_MAX_ATTEMPTS")->group(group);
  app.add_option("--max-resumes", gc.max_resumes, "mid-stream failovers of one request")->capture_default_str()
      ->check(CLI::Range(0, 10))->envname("UMA_GW_MAX_RESUMES")->group(group);
  app.add_option("--max-queue", gc.max_queue, "requests waiting for room on a full cluster at most; more get 429")
      ->capture_default_str()->check(CLI::Range(0, 1 << 20))->envname("UMA_GW_MAX_QUEUE")->group(group);
  app.add_option("--queue-timeout-ms", gc.queue_timeout_ms, "a request waiting longer for room gets 429")
      ->capture_default_str()->check(CLI::Range(1, 3600 * 1000))->envname("UMA_GW_QUEUE_TIMEOUT_MS")->group(group);
  app.add_option("--default-prefill-tok-s", gc.routing.default_prefill_tok_s,
                 "the prefill rate assumed for an agent that has not measured one")->capture_default_str()
      ->envname("UMA_GW_DEFAULT_PREFILL_TOK_S")->group(group);
}

void add_load_flags(CLI::App& app, GatewayFlags& f) {
  ColdLoadOptions& cold = f.setup.loads;
  FanOutOptions& fan = f.setup.server.fan_out;
  const char* group = "Loads on demand";
  app.add_option("--agent-key-file", f.agent_key_file, "the cluster's key (first line of the file), sent to agents "
                 "with every request and to uma-agents with the loads this gateway asks for")
      ->envname("UMA_AGENT_KEY_FILE")->check(CLI::ExistingFile)->group(cluster::kRedisFlagGroup);
  app.add_option("--load-policy", f.load_policy, "where a model no agent serves is loaded: predicted (lowest predicted "
                 "load time) | round-robin | random (baselines)")->capture_default_str()
      ->check(CLI::IsMember({"predicted", "round-robin", "random"}))->envname("UMA_GW_LOAD_POLICY")->group(group);
  app.add_option("--load-lock-ms", f.load_lock_ms, "a model's load lock lapses this long after its gateway stops renewing it")
      ->capture_default_str()->check(CLI::Range(100, 600000))->envname("UMA_GW_LOAD_LOCK_MS")->group(group);
  app.add_flag("--live-migration,!--no-live-migration", cold.live_migration, "when no loader has room for a model "
               "because models in use hold it, move the streams of one served elsewhere too (resumed there exactly) "
               "and load it in their place (default on)")->envname("UMA_GW_LIVE_MIGRATION")->group(group);
  app.add_option("--fan-out", fan.copies, "loaders that should hold a busy catalog model in a fast tier (the "
                 "one serving it included): the others are asked to prefetch it; 1: off")
      ->capture_default_str()->check(CLI::Range(1, 1024))->envname("UMA_GW_FAN_OUT")->group(group);
  app.add_option("--fan-out-rps", fan.min_rps, "a model's request rate (per second, through this gateway) that makes it busy")
      ->capture_default_str()->check(CLI::PositiveNumber)->envname("UMA_GW_FAN_OUT_RPS")->group(group);
  app.add_option("--fan-out-tier", fan.tier, "where fan-out copies go")->capture_default_str()
      ->check(CLI::IsMember({"nvme", "dram"}))->envname("UMA_GW_FAN_OUT_TIER")->group(group);
}

// Checks what the parser cannot and derives the setup; 0, or the exit code (said on stderr).
int derive(GatewayFlags& f) {
  GatewaySetup& s = f.setup;
  const auto fail = [](const std::string& why) {
    std::cerr << "uma-gw: " << why << "\n";
    return 2;
  };
  if (!gateway::parse_policy(f.policy, &s.server.policy)) return fail("--policy: want predicted | seed | round-robin | least-loaded");
  HostPort lp;
  if (f.listen.size() > 2 && f.listen.ends_with(":0")) {
    lp = {f.listen.substr(0, f.listen.size() - 2), 0};
  } else if (!parse_host_port(f.listen, &lp)) {
    return fail("--listen: want HOST:PORT");
  }
  s.server.host = lp.host;
  s.server.port = lp.port;
  if (Status rs = f.redis.resolve(&s.redis); !rs.ok()) return fail(rs.to_string());
  s.redis_text = f.redis.address;
  if (!f.chat_template.empty()) {  // a bad --chat-template is an error at start, not on every chat
    Status chat_st;
    if (!ChatTemplates::from_text(f.chat_template, "", "", &chat_st)) {
      spdlog::error("--chat-template: {}", chat_st.to_string());
      return 1;
    }
  }
  s.vocab.chat_template = f.chat_template;
  if (!f.client_key_file.empty()) {
    if (!s.server.api_key.empty()) return fail("--api-key and --api-key-file: give one");
    if (Status ks = read_secret_file(f.client_key_file, "API key", &s.server.api_key); !ks.ok()) return fail(ks.to_string());
  }
  if (!f.agent_key_file.empty()) {
    if (Status ks = read_secret_file(f.agent_key_file, "agent key", &s.loads.api_key); !ks.ok()) return fail(ks.to_string());
  }
  s.loads.lock_ttl = std::chrono::milliseconds(f.load_lock_ms);
  s.server.agent_key = s.loads.api_key;
  s.loads.policy = f.load_policy == "round-robin" ? LoadPolicy::kRoundRobin
                   : f.load_policy == "random"    ? LoadPolicy::kRandom
                                                  : LoadPolicy::kPredicted;
  std::random_device rd;
  s.loads.owner = "gw-" + std::to_string(::getpid()) + "-" + std::to_string(rd());
  s.server.forward_tokens = !f.agents_tokenize;
  s.server.webui = !f.no_webui;
  s.server.max_body_bytes = static_cast<std::size_t>(f.max_body_kib) * 1024;
  s.refresh = std::chrono::milliseconds(f.refresh_ms);
  s.policy_name = f.policy;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"uma-gw: an OpenAI-compatible gateway in front of umad agents"};
  GatewayFlags flags;
  add_http_flags(app, flags);
  add_model_flags(app, flags);
  add_routing_flags(app, flags);
  add_load_flags(app, flags);
  cluster::add_redis_flags(app, flags.redis);
  app.add_flag("--debug", flags.debug)->envname("UMA_GW_DEBUG");
  CLI11_PARSE(app, argc, argv);
  start_program_log("uma-gw", flags.debug ? spdlog::level::debug : spdlog::level::info);
  std::signal(SIGPIPE, SIG_IGN);
  if (int code = derive(flags)) return code;
  return Gateway(std::move(flags.setup)).run();
}
