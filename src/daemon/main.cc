// umad: wires the layers together. The main thread runs the I/O loop: one server (StreamServer)
// with a listener per front end (UdsServer, and HttpServer with --http); prompts become tokens in
// the prepare stage; a second thread owns the model and runs the scheduler (ComputeThread), whose
// events go back to the server. SIGINT/SIGTERM: stop accepting, end open streams with an error,
// free KV, remove the socket file, exit 0.
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <boost/asio/executor_work_guard.hpp>

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <thread>
#include <utility>

#include "chat/chat_templates.h"
#include "publish/agent_heartbeat.h"
#include "publish/kv_event_server.h"
#include "chat/structured_output.h"
#include "daemon/catalog_model.h"
#include "daemon/compute_spin.h"
#include "daemon/config.h"
#include "daemon/model_router.h"
#include "daemon/standby.h"
#include "daemon/supervisor_link.h"
#include "http/http_server.h"
#include "ipc/uds_server.h"
#include "runtime/draft_model.h"
#include "runtime/llama_runtime.h"
#include "runtime/vocab_model.h"
#include "sched/cpu_meter.h"
#include "sched/compute_thread.h"
#include "sched/scheduler.h"
#include "serve/prepare_stage.h"

namespace {

// The host part of an advertised base URL (http://host:port/...), else `fallback`.
std::string advertised_host(const std::string& url, const std::string& fallback) {
  std::string_view rest = url;
  if (const auto scheme = rest.find("://"); scheme != std::string_view::npos) rest.remove_prefix(scheme + 3);
  rest = rest.substr(0, rest.find('/'));
  if (!rest.empty() && rest.front() == '[') return std::string(rest.substr(0, rest.find(']') + 1));
  rest = rest.substr(0, rest.rfind(':'));
  return rest.empty() ? fallback : std::string(rest);
}

// The last line of defence: each front end turns what its handlers throw into an error for that
// one connection (net/stream_server.h, its exception boundary); anything that still escapes a handler is logged
// and counted, and the loop runs on (Asio allows run() again after a handler threw).
// Startup work that decodes (the draft model's warm-up, an agent's calibration) runs on a thread of its
// own that then ends: llama.cpp's OpenMP keeps a team of compute threads for each caller, and one
// left on the main thread (which goes on to run the I/O loop) slowed every later decode on a small
// machine: one stream 29 against 58 tok/s after the calibration, a one-row decode 10.7 against
// 7.7 ms after the draft's warm-up (15.9 ms with OMP_WAIT_POLICY=passive: OpenMP's waiting).
template <typename F>
void off_the_main_thread(F&& work) {
  std::thread(std::forward<F>(work)).join();
}

void run_io(boost::asio::io_context& io, uma::ServerMetrics& metrics) {
  for (;;) {
    try {
      io.run();
      return;
    } catch (const std::exception& e) {
      metrics.count_error(uma::ErrorCode::kInternal);
      spdlog::error("uncaught in the I/O loop, serving on: {}", e.what());
    } catch (...) {
      metrics.count_error(uma::ErrorCode::kInternal);
      spdlog::error("uncaught in the I/O loop, serving on");
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  using namespace uma;
  exec_with_compute_spin(argv);
  spdlog::set_default_logger(spdlog::stderr_color_mt("umad"));
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");
  // A standby (uma-agent's, daemon/standby.h) readies the GPUs, then runs the command line handed to it.
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
  Status st = parse_daemon_config(argc, argv, cfg, &exit_code);
  if (exit_code >= 0) return exit_code;

  spdlog::set_level(cfg.trace ? spdlog::level::trace : cfg.debug ? spdlog::level::debug : spdlog::level::info);
  std::signal(SIGPIPE, SIG_IGN);
  if (cfg.router()) return run_model_router(cfg, argc, argv);  // several models: a umad each behind one port

  boost::asio::io_context io;
  // Signals are caught from here on; one that arrives during the (possibly long) model load is
  // queued and handled as soon as the loop runs, so the shutdown is always the graceful one.
  boost::asio::signal_set signals(io, SIGINT, SIGTERM);
  ServerMetrics metrics;
  std::unique_ptr<ComputeThread> compute;
  // Between the front ends and the compute thread: text prompts become tokens (serve/prepare_stage.h).
  // Declared after the compute thread: it goes first, and never submits to a gone one.
  std::unique_ptr<PrepareStage> prepare;
  const auto submit = [&prepare](WorkItem item) { prepare->submit(std::move(item)); };
  // Structured output: JSON schemas become grammars at the protocol edge of both front ends.
  cfg.server.limits.schema_to_grammar = json_schema_to_gbnf;
  cfg.http.schema_to_grammar = json_schema_to_gbnf;
  // One admission for every front end: a slot per request in flight (net/session_slots.h).
  SessionSlots slots(cfg.server.max_sessions, {&metrics.sessions_open, &metrics.http_sessions_open});
  // The daemon's one server: every front end's connections, its slots, the compute thread's events.
  // Large request bodies are parsed (and chats rendered) on the prepare stage's threads too.
  const auto offload = [&prepare](std::function<void()> job) { return prepare && prepare->run(std::move(job)); };
  StreamServer serving(io, metrics, slots, submit, offload);
  // Requests past the slots wait in line, as llama-server's do. An agent's (or a model's under
  // uma-agent) refuse at once: gateways keep the line for a full cluster and route around a full agent.
  serving.set_slot_queue({cfg.agent || cfg.status_fd >= 0 ? 0 : cfg.scheduler.max_queue,
                          std::chrono::milliseconds(static_cast<std::int64_t>(cfg.scheduler.max_queue_ms))});
  UdsServer server(io, cfg.server, metrics, serving);
  // Claim the socket before the (slow) model load, so a second daemon fails fast.
  if (st = server.listen(); !st.ok()) {
    spdlog::error("{}", st.to_string());
    return 1;
  }
  if (server.activated()) spdlog::info("socket-activated: {} is the service manager's socket", cfg.server.socket_path);
  std::unique_ptr<HttpServer> http;
  if (cfg.http_enabled) {
    http = std::make_unique<HttpServer>(io, cfg.http, metrics, serving);
    if (st = http->listen(); !st.ok()) {
      spdlog::error("{}", st.to_string());
      return 1;
    }
    serving.start();
    http->start();
    std::string more;
    for (const std::string& h : cfg.http.more_hosts) more += (more.empty() ? " (and " : ", ") + h + ":" + std::to_string(http->port());
    spdlog::info("http listening on {}:{}{}", cfg.http.host, http->port(), more.empty() ? "" : more + ")");
  }
  // The cores this process may use (affinity, cgroup quota) and what others take of them; declared
  // before the scheduler, which reads it on the compute thread.
  ProcCpuMeter cpu_meter;
  if (cfg.runtime.n_threads == 0) cfg.runtime.n_threads = cpu_meter.allowed_cores();
  spdlog::info("threads: {} ({}){}; compute threads wait at barriers: {}", cfg.runtime.n_threads, cpu_meter.describe(),
               cfg.threads_auto ? ", fewer while other processes take cores" : ", fixed", compute_spin_setting());
  std::unique_ptr<LlamaRuntime> runtime;
  std::unique_ptr<CatalogModel> catalog_model;  // --model-id: the store behind the model's image
  {
    // With HTTP, the loop runs during the load so /health can say 503 (nothing else is served).
    std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> guard;
    std::thread loading_loop;
    if (http) {
      guard.emplace(io.get_executor());
      loading_loop = std::thread([&io, &metrics] { run_io(io, metrics); });
    }
    if (cfg.test_load_delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(cfg.test_load_delay_ms));
    if (!cfg.model_id.empty()) st = CatalogModel::open(cfg, &cfg.runtime, &catalog_model);
    if (st.ok()) runtime = LlamaRuntime::open(cfg.runtime, &st);
    cfg.runtime.image.reset();  // the runtime holds what it maps; a streamed model's image may go
    if (http) {
      guard.reset();
      io.stop();
      loading_loop.join();
      io.restart();
    }
  }
  if (!runtime) {
    spdlog::error("{}", st.to_string());
    return 1;
  }
  spdlog::info("model: {}", runtime->describe());
  // What the memory goes to, said once: nothing beyond this is reserved (prefix snapshots in host
  // memory are taken as prefixes are evicted, up to their cap).
  spdlog::info("memory: {}; prefix snapshots up to {} MiB of host memory, as used", runtime->memory_plan(),
               cfg.scheduler.prefix.enabled ? cfg.scheduler.prefix.host_bytes >> 20 : 0);
  {
    // Caps a client's request may reach, from the context one request may use (unless given).
    const RequestLimits limits = derive_request_limits(runtime->n_ctx_seq(), cfg);
    server.set_request_limits(limits.max_prompt_bytes, limits.max_frame_bytes);
    if (http) http->set_request_limits(limits.max_prompt_bytes, limits.max_body_bytes);
    spdlog::info("request limits: prompt {} KiB, frame {} KiB, HTTP body {} KiB", limits.max_prompt_bytes / 1024,
                 limits.max_frame_bytes / 1024, limits.max_body_bytes / 1024);
  }
  const std::string served_name =
      cfg.alias.empty() ? std::filesystem::path(cfg.runtime.model_path).filename().string() : cfg.alias;
  if (catalog_model) {
    catalog_model->store().drain();
    catalog_model->loaded();
    spdlog::info("model store: {} {}", cfg.model_id, catalog_model->describe_fill());
  }
  // The whole-batch prefill floor of per-sequence KV was measured on a GPU; on a CPU, where a
  // prompt token costs far more, per-sequence KV keeps the unified floor unless asked otherwise.
  if (!runtime->on_gpu() && !cfg.min_prefill_given) cfg.scheduler.per_seq_min_prefill = cfg.scheduler.min_prefill;
  // An agent publishes the prefix blocks it holds (cluster/kv_events.h): the journal hears the
  // prefix index from the compute thread; the stream's server runs on the I/O thread.
  cluster::BlockJournal block_journal;
  if (cfg.agent) cfg.scheduler.prefix.block_observer = &block_journal;
  Scheduler scheduler(*runtime, metrics, cfg.scheduler);
  scheduler.use_cpu_meter(&cpu_meter, cfg.threads_auto);
  std::unique_ptr<DraftModel> draft;  // declared after the scheduler: destroyed before it
  if (!cfg.draft_model.empty()) {
    DraftConfig dc;
    dc.model_path = cfg.draft_model;
    // The target's cells, and room for every sequence's drafts on top.
    dc.n_ctx = runtime->n_ctx() + runtime->n_seq_max() * (cfg.scheduler.draft_max + 1);
    dc.n_seq_max = runtime->n_seq_max();
    dc.n_threads = cfg.runtime.n_threads;
    dc.n_gpu_layers = cfg.runtime.n_gpu_layers;
    off_the_main_thread([&] { draft = DraftModel::open(dc, model_vocab(runtime->model()), &st); });
    if (!draft) {
      spdlog::error("{}", st.to_string());
      return 1;
    }
    scheduler.set_drafter(draft.get());
    spdlog::info("draft model: {} ({})", cfg.draft_model, draft->describe());
  }
  if (cfg.agent_calibrate_ms > 0) {
    // Standalone, umad is ready at once: the compute thread calibrates while idle, and the first
    // request cuts it short (Scheduler::begin_calibration). An agent's first beat carries its
    // measured prefill rate: it calibrates whole before it serves, before the compute thread starts.
    if (Status cal = scheduler.begin_calibration(cfg.agent_calibrate_ms); !cal.ok()) {
      spdlog::warn("calibration: {} (the cost model learns from the first requests)", cal.to_string());
    } else if (cfg.agent) {
      off_the_main_thread([&] {
        while (scheduler.calibrating()) (void)scheduler.calibrate_step();
      });
    }
  }
  compute = std::make_unique<ComputeThread>(scheduler, serving);
  prepare = std::make_unique<PrepareStage>(
      PrepareStage::Options{},
      [rt = runtime.get()](std::string_view text, std::vector<Token>& out, bool parse_special) {
        return rt->tokenize(text, out, parse_special);
      },
      [c = compute.get()](WorkItem item) { c->submit(std::move(item)); });
  if (http) {
    // Built here, before the threads start: the I/O thread renders with it and never calls the
    // runtime. No template at all is not fatal (completions still serve; chat says why not); an
    // explicit --chat-template that does not parse is.
    Status chat_st;
    std::unique_ptr<ChatTemplates> loaded = ChatTemplates::load(runtime->model(), cfg.chat_template, &chat_st);
    if (!loaded && !cfg.chat_template.empty()) {
      spdlog::error("--chat-template: {}", chat_st.to_string());
      return 1;
    }
    if (!loaded) {
      // As llama-server does: chat still serves, with chatml, and the start line says so.
      loaded = ChatTemplates::chatml_fallback(runtime->model(), &chat_st);
      spdlog::warn("the model has no chat template: chat uses chatml (--chat-template chooses another)");
    }
    if (loaded) {
      loaded->set_reasoning_format(cfg.reasoning_format);
      loaded->set_default_thinking(cfg.reasoning);
    }
    std::shared_ptr<const ChatTemplates> chat = std::move(loaded);
    HttpServer::ChatTemplate render = [chat_st](const ChatRequest&, ChatPrompt*) { return chat_st; };
    if (chat) render = [chat](const ChatRequest& request, ChatPrompt* out) { return chat->render(request, out); };
    const llama_vocab* vocab = model_vocab(runtime->model());
    const ModelNumbers numbers = model_numbers(runtime->model());
    http_route::ModelFacts facts;
    facts.n_ctx = runtime->n_ctx(), facts.n_ctx_seq = runtime->n_ctx_seq(), facts.n_ctx_train = numbers.n_ctx_train;
    facts.n_vocab = numbers.n_vocab, facts.n_embd = numbers.n_embd, facts.n_params = numbers.n_params;
    facts.size_bytes = numbers.size_bytes, facts.max_sessions = cfg.server.max_sessions, facts.path = cfg.runtime.model_path;
    facts.chat_template = chat ? chat->source() : std::string();
    facts.created = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
    const SpecialTokens special = special_tokens(runtime->model());
    facts.n_batch = runtime->n_batch();
    facts.bos = special.bos, facts.eos = special.eos, facts.sep = special.sep;
    facts.add_bos = special.add_bos, facts.add_eos = special.add_eos, facts.add_sep = special.add_sep;
    facts.reranker = model_is_reranker(runtime->model());
    facts.rerank_template = rerank_template(runtime->model());
    facts.fim_pre = special.fim_pre, facts.fim_suf = special.fim_suf, facts.fim_mid = special.fim_mid;
    facts.fim_rep = special.fim_rep, facts.fim_sep = special.fim_sep;
    http->set_vocabulary(
        [vocab](std::string_view text, bool add_special, bool parse_special, std::vector<std::int32_t>* out) {
          return tokenize_text(vocab, text, *out, parse_special, add_special);
        },
        [vocab](std::int32_t token) { return token_piece(vocab, token); }, std::move(facts));
    http->set_ready(served_name, std::move(render));
  }

  std::unique_ptr<cluster::KvEventServer> kv_events;
  std::unique_ptr<cluster::AgentHeartbeat> agent;
  SupervisorLink supervisor(cfg.status_fd);
  bool stopping = false;
  const auto shut_down = [&](const std::string& why) {
    if (std::exchange(stopping, true)) return;
    spdlog::info("{}: shutting down", why);
    supervisor.stopping(why);
    if (kv_events) kv_events->stop();  // gateways see the stream end and send nothing new
    server.stop_accepting();
    if (http) http->stop_accepting();
    serving.begin_shutdown();
    compute->request_stop();
  };
  // SIGTERM with --drain-sec: no new requests (gateways hear `draining` on the KV-event stream and
  // move their streams to other agents), those in flight end or move, then the shutdown above.
  boost::asio::steady_timer drain_poll(io);
  std::chrono::steady_clock::time_point drain_until{};
  bool draining = false;
  std::function<void()> poll_drained = [&] {
    if (stopping) return;
    if (slots.in_use() == 0) return shut_down("drained");
    if (std::chrono::steady_clock::now() >= drain_until) {
      return shut_down("--drain-sec over with " + std::to_string(slots.in_use()) + " requests in flight");
    }
    drain_poll.expires_after(std::chrono::milliseconds(50));
    drain_poll.async_wait([&](const boost::system::error_code& ec) {
      if (!ec) poll_drained();
    });
  };
  const auto drain = [&](int sig) {
    draining = true;
    metrics.draining.store(1, std::memory_order_relaxed);
    metrics.drain_in_flight.store(slots.in_use(), std::memory_order_relaxed);
    spdlog::info("signal {}: draining {} requests in flight for up to {} s", sig, slots.in_use(), cfg.drain_sec);
    supervisor.stopping("draining");
    if (kv_events) kv_events->drain();
    if (agent) agent->stop();  // out of the cluster view: no gateway routes here again
    server.stop_accepting();
    if (http) http->stop_accepting();
    drain_until = std::chrono::steady_clock::now() + std::chrono::seconds(cfg.drain_sec);
    poll_drained();
  };
  std::function<void()> await_signal = [&] {
    signals.async_wait([&](const boost::system::error_code& ec, int sig) {
      if (ec) return;
      if (sig != SIGTERM || cfg.drain_sec == 0 || draining || stopping) return shut_down("signal " + std::to_string(sig));
      drain(sig);
      await_signal();  // a second signal stops at once
    });
  };
  await_signal();
  // Supervised: the agent asks for an unload with SIGUSR1, honoured only while no request is in
  // flight. Checked here, on the thread that admits requests, so none slips in between.
  boost::asio::signal_set unload_signal(io);
  std::function<void()> await_unload = [&] {
    unload_signal.async_wait([&](const boost::system::error_code& ec, int) {
      if (ec) return;
      if (slots.in_use() == 0) return shut_down("unload (idle)");
      spdlog::info("unload asked while {} requests are in flight: serving on", slots.in_use());
      supervisor.refused_stop();
      await_unload();
    });
  };
  if (supervisor.attached()) {
    unload_signal.add(SIGUSR1);
    slots.set_observer([&supervisor](std::int32_t n) { supervisor.in_use(n); });
    await_unload();
  }
  compute->start([&] {
    // Runs on the compute thread after its last events were delivered; hop to the I/O thread.
    boost::asio::post(io, [&] {
      serving.finish_shutdown(std::chrono::seconds(2), [&] {
        server.remove_socket_file();
        io.stop();
      });
    });
  });
  if (cfg.agent) {
    cluster::KvEventConfig kc;
    kc.host = cfg.http.host;
    kc.port = cfg.agent_events_port;
    kc.block = cfg.scheduler.prefix.block;
    kv_events = std::make_unique<cluster::KvEventServer>(io, kc, block_journal, metrics);
    if (st = kv_events->listen(); !st.ok()) {
      spdlog::error("--agent-events-port: {}", st.to_string());
      return 1;
    }
    cluster::AgentConfig ac;
    const std::string hostport = cfg.http.host + ":" + std::to_string(http->port());
    ac.id = cfg.agent_id.empty() ? hostport : cfg.agent_id;
    ac.address = cfg.advertise.empty() ? "http://" + hostport : cfg.advertise;
    ac.events = advertised_host(ac.address, cfg.http.host) + ":" + std::to_string(kv_events->port());
    if (Status rs = cluster::redis_address_from_flags(cfg.redis, cfg.redis_password_file, cfg.redis_user, &ac.redis); !rs.ok()) {
      spdlog::error("{}", rs.to_string());
      return 2;
    }
    ac.model_name = served_name;
    std::error_code ec;
    ac.model_bytes = catalog_model ? static_cast<std::int64_t>(catalog_model->bytes())
                                   : static_cast<std::int64_t>(std::filesystem::file_size(cfg.runtime.model_path, ec));
    ac.max_sessions = cfg.server.max_sessions;
    if (catalog_model) {
      store::TierStore* ts = &catalog_model->store();  // outlives the heartbeat (declared before it)
      ac.store_view = [ts, id = cfg.model_id](cluster::AgentState& a) {
        // Loaded; `tier` says where its bytes would come from again (a restart, an unload).
        if (!a.models.empty()) a.models.front().tier = std::string(store::tier_name(ts->tier(id)));
        a.load_dram_bytes_s = ts->rate_bytes_s(store::Tier::kDram);
        a.load_nvme_bytes_s = ts->rate_bytes_s(store::Tier::kNvme);
        a.load_remote_bytes_s = ts->rate_bytes_s(store::Tier::kRemote);
        a.load_queue_bytes = static_cast<std::int64_t>(ts->queued_bytes());
      };
    }
    agent = std::make_unique<cluster::AgentHeartbeat>(std::move(ac), metrics);
    agent->start();
    kv_events->start(agent->boot_id());
    spdlog::info("agent {} heartbeating to redis {} (boot {})", cfg.agent_id.empty() ? hostport : cfg.agent_id,
                 cfg.redis, agent->boot_id());
  }
  if (!http) serving.start();
  server.start();
  supervisor.ready(http ? http->port() : 0, cfg.server.socket_path);
  spdlog::info("listening on {} ({} protocol, max sessions {}, n_ctx {}, prefix snapshots up to {} MiB of host memory)",
               cfg.server.socket_path, cfg.server.protocol == ProtocolKind::kJson ? "json" : "newline",
               cfg.server.max_sessions, runtime->n_ctx(),
               cfg.scheduler.prefix.enabled ? cfg.scheduler.prefix.host_bytes >> 20 : 0);
  run_io(io, metrics);
  if (kv_events) kv_events->stop();
  if (agent) agent->stop();  // leaves the cluster at once rather than after the key's TTL
  compute->join();
  prepare.reset();  // its threads tokenize with the runtime, which goes before it
  slots.set_observer(nullptr);  // the link goes before the servers that may still give slots back
  spdlog::info("stopped: {} tokens generated, {} requests", metrics.tokens_generated_total.load(),
               metrics.requests_total.load());
  return 0;
}
