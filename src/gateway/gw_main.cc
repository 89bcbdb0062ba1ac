// uma-gw: the cluster's stateless OpenAI gateway (docs/CLUSTER.md). One I/O thread runs
// the front end, the proxied requests and the agents' KV-event streams; one more thread reads the
// cluster view from Redis every --refresh-ms and hands it to the I/O thread (Redis is never on a
// request's path; while it is down the last view stays: fail-static).
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <CLI/CLI.hpp>
#include <unistd.h>

#include <random>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <condition_variable>
#include <csignal>
#include <functional>
#include <iostream>
#include <mutex>
#include <thread>

#include "chat/chat_templates.h"
#include "chat/structured_output.h"
#include "gateway/cluster_view.h"
#include "common/secret_file.h"
#include "gateway/agent_directory.h"
#include "gateway/gateway_server.h"

int main(int argc, char** argv) {
  using namespace uma;
  using namespace uma::gateway;
  CLI::App app{"uma-gw: an OpenAI-compatible gateway in front of umad agents"};
  std::string listen = "127.0.0.1:8000", redis = "127.0.0.1:6379", model, chat_template, policy = "predicted";
  int refresh_ms = 200;
  int drain_sec = 30;
  GatewayConfig gc;
  bool debug = false;
  app.add_option("--listen", listen, "HOST:PORT to serve on (port 0: any free one)")->envname("UMA_GW_LISTEN")->capture_default_str();
  app.add_option("--redis", redis, "the cluster's Redis, HOST:PORT")->envname("UMA_REDIS")->capture_default_str();
  std::string redis_password_file, redis_user;
  app.add_option("--redis-password-file", redis_password_file, "Redis's password: the first line of this file")
      ->envname("UMA_REDIS_PASSWORD_FILE")->check(CLI::ExistingFile);
  app.add_option("--redis-user", redis_user, "the Redis ACL user the password is for")->envname("UMA_REDIS_USER");
  app.add_option("--model", model, "a GGUF whose vocabulary and chat template serve models the catalog does not have "
                 "(agents started with a file of their own; weights are not read). Catalog models bring their own")
      ->envname("UMA_MODEL");
  app.add_option("--chat-template", chat_template, "as umad's --chat-template, for every model (the agents' must be the same)")->envname("UMA_GW_CHAT_TEMPLATE");
  bool agents_tokenize = false;
  app.add_flag("--agents-tokenize", agents_tokenize, "agents tokenize each prompt again instead of running the tokens "
               "the gateway computed to route it (for agents whose template differs from the gateway's)")->envname("UMA_GW_AGENTS_TOKENIZE");
  VocabCache::Options vo;
  app.add_option("--vocab-cache", vo.capacity, "catalog vocabularies kept loaded at most (least recently used out first)")
      ->capture_default_str()->check(CLI::Range(1, 1024))->envname("UMA_GW_VOCAB_CACHE");
  app.add_option("--policy", policy, "routing: predicted | seed | round-robin | least-loaded")->capture_default_str()->envname("UMA_GW_POLICY");
  app.add_option("--refresh-ms", refresh_ms, "read the cluster view from Redis this often")->capture_default_str()
      ->check(CLI::Range(10, 10000))->envname("UMA_GW_REFRESH_MS");
  app.add_option("--drain-sec", drain_sec, "SIGTERM: /health says 503, no new connections, the requests in flight are "
                 "carried to their end for up to this long, then the gateway exits (0: at once; a second signal too)")
      ->envname("UMA_GW_DRAIN_SEC")->capture_default_str()->check(CLI::Range(0, 86400));
  app.add_option("--max-connections", gc.max_connections)->capture_default_str()->envname("UMA_GW_MAX_CONNECTIONS");
  app.add_option("--max-attempts", gc.max_attempts, "dispatches of a request before its first byte")->capture_default_str()
      ->check(CLI::Range(1, 10))->envname("UMA_GW_MAX_ATTEMPTS");
  app.add_option("--max-resumes", gc.max_resumes, "mid-stream failovers of one request")->capture_default_str()
      ->check(CLI::Range(0, 10))->envname("UMA_GW_MAX_RESUMES");
  app.add_option("--max-queue", gc.max_queue, "requests waiting for room on a full cluster at most; more get 429")
      ->capture_default_str()->check(CLI::Range(0, 1 << 20))->envname("UMA_GW_MAX_QUEUE");
  app.add_option("--queue-timeout-ms", gc.queue_timeout_ms, "a request waiting longer for room gets 429")
      ->capture_default_str()->check(CLI::Range(1, 3600 * 1000))->envname("UMA_GW_QUEUE_TIMEOUT_MS");
  std::string agent_key_file;
  ColdLoadOptions cold;
  std::int64_t load_lock_ms = cold.lock_ttl.count();
  app.add_option("--agent-key-file", agent_key_file, "the cluster's key (first line of the file), sent to agents "
                 "with every request and to uma-agents with the loads this gateway asks for")->envname("UMA_AGENT_KEY_FILE")->check(CLI::ExistingFile);
  std::string load_policy = "predicted";
  app.add_option("--load-policy", load_policy, "where a model no agent serves is loaded: predicted (lowest predicted "
                 "load time) | round-robin | random (baselines)")->capture_default_str()
      ->check(CLI::IsMember({"predicted", "round-robin", "random"}))->envname("UMA_GW_LOAD_POLICY");
  app.add_option("--load-lock-ms", load_lock_ms, "a model's load lock lapses this long after its gateway stops renewing it")
      ->capture_default_str()->check(CLI::Range(100, 600000))->envname("UMA_GW_LOAD_LOCK_MS");
  app.add_flag("--live-migration,!--no-live-migration", cold.live_migration, "when no loader has room for a model "
               "because models in use hold it, move the streams of one served elsewhere too (resumed there exactly) "
               "and load it in their place (default on)")->envname("UMA_GW_LIVE_MIGRATION");
  app.add_option("--fan-out", gc.fan_out.copies, "loaders that should hold a busy catalog model in a fast tier (the "
                 "one serving it included): the others are asked to prefetch it; 1: off")
      ->capture_default_str()->check(CLI::Range(1, 1024))->envname("UMA_GW_FAN_OUT");
  app.add_option("--fan-out-rps", gc.fan_out.min_rps, "a model's request rate (per second, through this gateway) that makes it busy")
      ->capture_default_str()->check(CLI::PositiveNumber)->envname("UMA_GW_FAN_OUT_RPS");
  app.add_option("--fan-out-tier", gc.fan_out.tier, "where fan-out copies go")->capture_default_str()
      ->check(CLI::IsMember({"nvme", "dram"}))->envname("UMA_GW_FAN_OUT_TIER");
  app.add_option("--tokenize-threads", gc.tokenize_threads, "threads that tokenize prompts, off the I/O thread")
      ->capture_default_str()
      ->check(CLI::Range(1, 64))->envname("UMA_GW_TOKENIZE_THREADS");
  app.add_option("--default-prefill-tok-s", gc.routing.default_prefill_tok_s,
                 "the prefill rate assumed for an agent that has not measured one")->capture_default_str()->envname("UMA_GW_DEFAULT_PREFILL_TOK_S");
  std::string client_key_file;
  app.add_option("--api-key", gc.api_key, "what clients must send: Authorization: Bearer KEY or x-api-key: KEY "
                 "(GET /health is open)")->envname("UMA_GW_API_KEY");
  app.add_option("--api-key-file", client_key_file, "the same, from the first line of a file")->check(CLI::ExistingFile)->envname("UMA_GW_API_KEY_FILE");
  bool no_webui = false;
  app.add_flag("--no-webui", no_webui, "no web page (a chat and the cluster's status) at GET /")->envname("UMA_GW_NO_WEBUI");
  app.add_option("--cors-origin", gc.cors_origin, "browsers may call from this origin ('*': any); preflights answered")->envname("UMA_GW_CORS_ORIGIN");
  app.add_flag("--strict-fields", gc.limits.strict_fields, "a request field umad does not know is a 400 (by default "
               "it is ignored, as the agents do)")->envname("UMA_GW_STRICT_FIELDS");
  app.add_flag("--debug", debug)->envname("UMA_GW_DEBUG");
  CLI11_PARSE(app, argc, argv);
  gc.webui = !no_webui;

  spdlog::set_default_logger(spdlog::stderr_color_mt("uma-gw"));
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");
  spdlog::set_level(debug ? spdlog::level::debug : spdlog::level::info);
  std::signal(SIGPIPE, SIG_IGN);

  if (!cluster::parse_policy(policy, &gc.policy)) {
    std::cerr << "uma-gw: --policy: want predicted | seed | round-robin | least-loaded\n";
    return 2;
  }
  HostPort lp;
  if (!parse_host_port(listen, &lp) && listen.find(":0") == std::string::npos) {
    std::cerr << "uma-gw: --listen: want HOST:PORT\n";
    return 2;
  }
  if (listen.size() > 2 && listen.substr(listen.size() - 2) == ":0") lp = {listen.substr(0, listen.size() - 2), 0};
  cluster::RedisAddress ra;
  if (Status rs = cluster::redis_address_from_flags(redis, redis_password_file, redis_user, &ra); !rs.ok()) {
    std::cerr << "uma-gw: " << rs.to_string() << "\n";
    return 2;
  }
  Status st;
  if (!chat_template.empty()) {  // a bad --chat-template is an error at start, not on every chat
    Status chat_st;
    if (!ChatTemplates::from_text(chat_template, "", "", &chat_st)) {
      spdlog::error("--chat-template: {}", chat_st.to_string());
      return 1;
    }
  }
  std::shared_ptr<const Vocabulary> fallback;
  if (!model.empty() && !(fallback = open_vocabulary(model, chat_template, &st))) {
    spdlog::error("--model: {}", st.to_string());
    return 1;
  }
  vo.chat_template = chat_template;
  VocabCache vocabs(vo, ra, fallback);

  if (!client_key_file.empty()) {
    if (!gc.api_key.empty()) {
      std::cerr << "uma-gw: --api-key and --api-key-file: give one\n";
      return 2;
    }
    if (Status ks = read_secret_file(client_key_file, "API key", &gc.api_key); !ks.ok()) {
      std::cerr << "uma-gw: " << ks.to_string() << "\n";
      return 2;
    }
  }
  if (!agent_key_file.empty()) {
    if (Status ks = read_secret_file(agent_key_file, "agent key", &cold.api_key); !ks.ok()) {
      std::cerr << "uma-gw: " << ks.to_string() << "\n";
      return 2;
    }
  }
  cold.lock_ttl = std::chrono::milliseconds(load_lock_ms);
  gc.agent_key = cold.api_key;
  cold.policy = load_policy == "round-robin" ? LoadPolicy::kRoundRobin : load_policy == "random" ? LoadPolicy::kRandom : LoadPolicy::kPredicted;
  {
    std::random_device rd;
    cold.owner = "gw-" + std::to_string(::getpid()) + "-" + std::to_string(rd());
  }

  boost::asio::io_context io;
  ColdLoads cold_loads(io, ra, cold);
  gc.host = lp.host;
  gc.port = lp.port;
  gc.forward_tokens = !agents_tokenize;
  std::unique_ptr<GatewayServer> server;
  AgentDirectory agents(
      io, DirectoryOptions{},
      [&server](const std::string& id, bool hung) {
        if (server) server->agent_gone(id, hung);
      },
      [&server] {
        if (server) server->kick();
      });
  server = std::make_unique<GatewayServer>(io, gc, agents, vocabs, json_schema_to_gbnf, &cold_loads);
  agents.set_on_draining([&server](const std::string& id) {
    if (server) server->agent_draining(id);
  });
  if (st = server->listen(); !st.ok()) {
    spdlog::error("{}", st.to_string());
    return 1;
  }
  server->start();
  agents.start();  // the streams' silence checks

  // The Redis reader: its own thread and connection; each view goes to the I/O thread.
  std::mutex mu;
  std::condition_variable cv;
  bool stopping = false;
  std::thread refresher([&] {
    cluster::ClusterView view(ra, std::chrono::milliseconds(200), std::chrono::milliseconds(3000));
    bool was_down = false;
    std::unique_lock<std::mutex> lock(mu);
    while (!stopping) {
      lock.unlock();
      const Status rs = view.refresh(std::chrono::system_clock::now());
      if (!rs.ok() && !was_down) spdlog::warn("cannot read redis ({}): routing on the last view", rs.message());
      if (rs.ok() && was_down) spdlog::info("redis answers again");
      was_down = !rs.ok();
      if (rs.ok()) vocabs.set_catalog(view.catalog_vocab());
      boost::asio::post(io, [&agents, agents_now = view.agents(), catalog = view.catalog(), loaders = view.loaders()]() mutable {
        agents.set_catalog(std::move(catalog));
        agents.set_loaders(std::move(loaders));
        agents.update(agents_now, SteadyClock::now());
      });
      lock.lock();
      cv.wait_for(lock, std::chrono::milliseconds(refresh_ms), [&] { return stopping; });
    }
  });

  // SIGTERM drains (an orchestrator's stop); SIGINT, a second signal or the end of --drain-sec stop at once.
  boost::asio::signal_set signals(io, SIGINT, SIGTERM);
  boost::asio::steady_timer drain_poll(io);
  SteadyClock::time_point drain_until{};
  const auto stop_now = [&] {
    drain_poll.cancel();
    server->stop();
    io.stop();
  };
  std::function<void()> poll_drained = [&] {
    if (server->idle() || SteadyClock::now() >= drain_until) {
      spdlog::info("{}", server->idle() ? "drained: stopping" : "--drain-sec is over: stopping with requests in flight");
      return stop_now();
    }
    drain_poll.expires_after(std::chrono::milliseconds(100));
    drain_poll.async_wait([&](const boost::system::error_code& e) {
      if (!e) poll_drained();
    });
  };
  std::function<void()> await_signal = [&] {
    signals.async_wait([&](const boost::system::error_code& ec, int sig) {
      if (ec) return;
      if (sig != SIGTERM || drain_sec == 0 || server->draining()) return stop_now();
      spdlog::info("signal {}: draining for up to {} s", sig, drain_sec);
      drain_until = SteadyClock::now() + std::chrono::seconds(drain_sec);
      server->drain_clients();
      poll_drained();
      await_signal();
    });
  };
  await_signal();
  spdlog::info("uma-gw: policy {}, redis {}, vocabulary for models outside the catalog: {}", policy, redis,
               model.empty() ? "none" : model);
  std::cout << "uma-gw listening on http://" << gc.host << ":" << server->port() << std::endl;
  io.run();
  {
    const std::lock_guard<std::mutex> lock(mu);
    stopping = true;
  }
  cv.notify_all();
  refresher.join();
  server.reset();
  return 0;
}
