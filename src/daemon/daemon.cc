#include "daemon/daemon.h"

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>
#include <spdlog/spdlog.h>

#include <csignal>
#include <filesystem>
#include <optional>
#include <thread>
#include <utility>

#include "chat/chat_templates.h"
#include "chat/structured_output.h"
#include "daemon/compute_spin.h"
#include "http/image_input.h"
#include "publish/agent_heartbeat.h"
#include "publish/kv_event_server.h"
#include "runtime/vocab_model.h"

namespace uma {
namespace {

constexpr int kImagePrepareThreads = 4;

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

void run_io(boost::asio::io_context& io, ServerMetrics& metrics) {
  for (;;) {
    try {
      io.run();
      return;
    } catch (const std::exception& e) {
      metrics.count_error(ErrorCode::kInternal);
      spdlog::error("uncaught in the I/O loop, serving on: {}", e.what());
    } catch (...) {
      metrics.count_error(ErrorCode::kInternal);
      spdlog::error("uncaught in the I/O loop, serving on");
    }
  }
}

// Structured output: JSON schemas become grammars at the protocol edge of both front ends.
DaemonConfig with_grammars(DaemonConfig cfg) {
  cfg.server.limits.schema_to_grammar = json_schema_to_gbnf;
  cfg.http.schema_to_grammar = json_schema_to_gbnf;
  return cfg;
}

}  // namespace

Daemon::Daemon(DaemonConfig cfg)
    : cfg_(with_grammars(std::move(cfg))),
      signals_(io_, SIGINT, SIGTERM),
      slots_(cfg_.server.max_sessions, {&metrics_.sessions_open, &metrics_.http_sessions_open}),
      // Large request bodies are parsed (and chats rendered) on the prepare stage's threads too.
      serving_(io_, metrics_, slots_, [this](WorkItem item) { prepare_->submit(std::move(item)); },
               [this](std::function<void()> job) { return prepare_ && prepare_->run(std::move(job)); }),
      server_(io_, cfg_.server, metrics_, serving_),
      supervisor_(cfg_.status_fd),
      drain_poll_(io_),
      unload_signal_(io_) {
  // Requests past the slots wait in line, as llama-server's do. An agent's (or a model's under
  // uma-agent) refuse at once: gateways keep the line for a full cluster and route around a full agent.
  serving_.set_slot_queue({cfg_.agent || cfg_.status_fd >= 0 ? 0 : cfg_.scheduler.max_queue,
                           std::chrono::milliseconds(static_cast<std::int64_t>(cfg_.scheduler.max_queue_ms))});
}

// Members go in reverse order (the header); what must go earlier went at the end of run().
Daemon::~Daemon() = default;

int Daemon::run() {
  if (int code = listen()) return code;
  if (int code = load_model()) return code;
  if (int code = build_scheduler()) return code;
  compute_ = std::make_unique<ComputeThread>(*scheduler_, serving_);
  // With a projector, images are decoded and hashed on several threads at once (their encodes
  // still take the projector one at a time), as llama-server decodes them on its HTTP threads.
  PrepareStage::Options prepare_options;
  if (images_) prepare_options.threads = kImagePrepareThreads;
  prepare_ = std::make_unique<PrepareStage>(
      prepare_options,
      [rt = runtime_.get()](std::string_view text, std::vector<Token>& out, bool parse_special) {
        return rt->tokenize(text, out, parse_special);
      },
      [c = compute_.get()](WorkItem item) { c->submit(std::move(item)); },
      images_ ? PrepareStage::PrepareImages([this](const Request& r, std::vector<Token>* tokens, std::vector<PromptImage>* placed) {
        Status st = images_->prepare(r.prompt, r.parse_special, r.images, tokens, placed);
        const ImageEncoder::Counts c = images_->counts();
        metrics_.images_encoded_total = c.encoded;
        metrics_.image_cache_hits_total = c.cache_hits;
        return st;
      })
              : PrepareStage::PrepareImages());
  if (http_) {
    if (int code = set_up_chat()) return code;
  }
  watch_signals();
  compute_->start([this] {
    // Runs on the compute thread after its last events were delivered; hop to the I/O thread.
    boost::asio::post(io_, [this] {
      serving_.finish_shutdown(std::chrono::seconds(2), [this] {
        server_.remove_socket_file();
        io_.stop();
      });
    });
  });
  if (cfg_.agent) {
    if (int code = join_cluster()) return code;
  }
  if (!http_) serving_.start();
  server_.start();
  supervisor_.ready(http_ ? http_->port() : 0, cfg_.server.socket_path);
  spdlog::info("listening on {} ({} protocol, max sessions {}, n_ctx {}, prefix snapshots up to {} MiB of host memory)",
               cfg_.server.socket_path, cfg_.server.protocol == ProtocolKind::kJson ? "json" : "newline",
               cfg_.server.max_sessions, runtime_->n_ctx(),
               cfg_.scheduler.prefix.enabled ? cfg_.scheduler.prefix.host_bytes >> 20 : 0);
  run_io(io_, metrics_);
  if (kv_events_) kv_events_->stop();
  if (agent_) agent_->stop();  // leaves the cluster at once rather than after the key's TTL
  compute_->join();
  prepare_.reset();  // its threads tokenize with the runtime, which goes before it
  slots_.set_observer(nullptr);  // the link goes before the servers that may still give slots back
  spdlog::info("stopped: {} tokens generated, {} requests", metrics_.tokens_generated_total.load(),
               metrics_.requests_total.load());
  return 0;
}

// Claims the socket (and the HTTP port) before the model load, so a second daemon fails fast.
int Daemon::listen() {
  if (Status st = server_.listen(); !st.ok()) {
    spdlog::error("{}", st.to_string());
    return 1;
  }
  if (server_.activated()) spdlog::info("socket-activated: {} is the service manager's socket", cfg_.server.socket_path);
  if (!cfg_.http_enabled) return 0;
  http_ = std::make_unique<HttpServer>(io_, cfg_.http, metrics_, serving_);
  if (Status st = http_->listen(); !st.ok()) {
    spdlog::error("{}", st.to_string());
    return 1;
  }
  serving_.start();
  http_->start();
  std::string more;
  for (const std::string& h : cfg_.http.more_hosts) more += (more.empty() ? " (and " : ", ") + h + ":" + std::to_string(http_->port());
  spdlog::info("http listening on {}:{}{}", cfg_.http.host, http_->port(), more.empty() ? "" : more + ")");
  return 0;
}

int Daemon::load_model() {
  if (cfg_.runtime.n_threads == 0) cfg_.runtime.n_threads = cpu_meter_.allowed_cores();
  spdlog::info("threads: {} ({}){}; compute threads wait at barriers: {}", cfg_.runtime.n_threads, cpu_meter_.describe(),
               cfg_.threads_auto ? ", fewer while other processes take cores" : ", fixed", compute_spin_setting());
  Status st;
  {
    // With HTTP, the loop runs during the load so /health can say 503 (nothing else is served).
    std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> guard;
    std::thread loading_loop;
    if (http_) {
      guard.emplace(io_.get_executor());
      loading_loop = std::thread([this] { run_io(io_, metrics_); });
    }
    if (cfg_.test_load_delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(cfg_.test_load_delay_ms));
    if (!cfg_.model_id.empty()) st = CatalogModel::open(cfg_, &cfg_.runtime, &catalog_model_);
    if (st.ok()) runtime_ = LlamaRuntime::open(cfg_.runtime, &st);
    cfg_.runtime.image.reset();  // the runtime holds what it maps; a streamed model's image may go
    if (http_) {
      guard.reset();
      io_.stop();
      loading_loop.join();
      io_.restart();
    }
  }
  if (!runtime_) {
    spdlog::error("{}", st.to_string());
    return 1;
  }
  spdlog::info("model: {}", runtime_->describe());
  if (!cfg_.mmproj.empty()) {
    images_ = ImageEncoder::open({cfg_.mmproj, cfg_.runtime.n_threads, runtime_->on_gpu(), cfg_.image_cache_bytes},
                                 runtime_->model(), &st);
    if (!images_) {
      spdlog::error("{}", st.to_string());
      return 1;
    }
    spdlog::info("vision projector: {} (images on the {}; recent images' embeddings kept up to {} MiB)", cfg_.mmproj,
                 runtime_->on_gpu() ? "GPU" : "CPU", cfg_.image_cache_bytes >> 20);
  }
  // What the memory goes to, said once: nothing beyond this is reserved (prefix snapshots in host
  // memory are taken as prefixes are evicted, up to their cap).
  spdlog::info("memory: {}; prefix snapshots up to {} MiB of host memory, as used", runtime_->memory_plan(),
               cfg_.scheduler.prefix.enabled ? cfg_.scheduler.prefix.host_bytes >> 20 : 0);
  // Caps a client's request may reach, from the context one request may use (unless given).
  const RequestLimits limits = derive_request_limits(runtime_->n_ctx_seq(), cfg_);
  server_.set_request_limits(limits.max_prompt_bytes, limits.max_frame_bytes);
  if (http_) http_->set_request_limits(limits.max_prompt_bytes, limits.max_body_bytes);
  spdlog::info("request limits: prompt {} KiB, frame {} KiB, HTTP body {} KiB", limits.max_prompt_bytes / 1024,
               limits.max_frame_bytes / 1024, limits.max_body_bytes / 1024);
  served_name_ = cfg_.alias.empty() ? std::filesystem::path(cfg_.runtime.model_path).filename().string() : cfg_.alias;
  if (catalog_model_) {
    catalog_model_->store().drain();
    catalog_model_->loaded();
    spdlog::info("model store: {} {}", cfg_.model_id, catalog_model_->describe_fill());
  }
  return 0;
}

int Daemon::build_scheduler() {
  // The whole-batch prefill floor of per-sequence KV was measured on a GPU; on a CPU, where a
  // prompt token costs far more, per-sequence KV keeps the unified floor unless asked otherwise.
  if (!runtime_->on_gpu() && !cfg_.min_prefill_given) cfg_.scheduler.per_seq_min_prefill = cfg_.scheduler.min_prefill;
  if (cfg_.agent) cfg_.scheduler.prefix.block_observer = &block_journal_;
  scheduler_ = std::make_unique<Scheduler>(*runtime_, metrics_, cfg_.scheduler);
  scheduler_->use_cpu_meter(&cpu_meter_, cfg_.threads_auto);
  if (!cfg_.draft_model.empty()) {
    DraftConfig dc;
    dc.model_path = cfg_.draft_model;
    // The target's cells, and room for every sequence's drafts on top.
    dc.n_ctx = runtime_->n_ctx() + runtime_->n_seq_max() * (cfg_.scheduler.draft_max + 1);
    dc.n_seq_max = runtime_->n_seq_max();
    dc.n_threads = cfg_.runtime.n_threads;
    dc.n_gpu_layers = cfg_.runtime.n_gpu_layers;
    Status st;
    off_the_main_thread([&] { draft_ = DraftModel::open(dc, model_vocab(runtime_->model()), &st); });
    if (!draft_) {
      spdlog::error("{}", st.to_string());
      return 1;
    }
    scheduler_->set_drafter(draft_.get());
    spdlog::info("draft model: {} ({})", cfg_.draft_model, draft_->describe());
  }
  if (cfg_.agent_calibrate_ms > 0) {
    // Standalone, umad is ready at once: the compute thread calibrates while idle, and the first
    // request cuts it short (Scheduler::begin_calibration). An agent's first beat carries its
    // measured prefill rate: it calibrates whole before it serves, before the compute thread starts.
    if (Status cal = scheduler_->begin_calibration(cfg_.agent_calibrate_ms); !cal.ok()) {
      spdlog::warn("calibration: {} (the cost model learns from the first requests)", cal.to_string());
    } else if (cfg_.agent) {
      off_the_main_thread([this] {
        while (scheduler_->calibrating()) (void)scheduler_->calibrate_step();
      });
    }
  }
  return 0;
}

// Built before the threads start: the I/O thread renders with it and never calls the runtime. No
// template at all is not fatal (completions still serve; chat says why not); an explicit
// --chat-template that does not parse is.
int Daemon::set_up_chat() {
  Status chat_st;
  std::unique_ptr<ChatTemplates> loaded = ChatTemplates::load(runtime_->model(), cfg_.chat_template, &chat_st);
  if (!loaded && !cfg_.chat_template.empty()) {
    spdlog::error("--chat-template: {}", chat_st.to_string());
    return 1;
  }
  if (!loaded) {
    // As llama-server does: chat still serves, with chatml, and the start line says so.
    loaded = ChatTemplates::chatml_fallback(runtime_->model(), &chat_st);
    spdlog::warn("the model has no chat template: chat uses chatml (--chat-template chooses another)");
  }
  if (loaded) {
    loaded->set_reasoning_format(cfg_.reasoning_format);
    loaded->set_default_thinking(cfg_.reasoning);
  }
  std::shared_ptr<const ChatTemplates> chat = std::move(loaded);
  HttpServer::ChatTemplate render = [chat_st](const ChatRequest&, ChatPrompt*) { return chat_st; };
  if (chat) render = [chat](const ChatRequest& request, ChatPrompt* out) { return chat->render(request, out); };
  const llama_vocab* vocab = model_vocab(runtime_->model());
  const ModelNumbers numbers = model_numbers(runtime_->model());
  http_route::ModelFacts facts;
  facts.n_ctx = runtime_->n_ctx(), facts.n_ctx_seq = runtime_->n_ctx_seq(), facts.n_ctx_train = numbers.n_ctx_train;
  facts.n_vocab = numbers.n_vocab, facts.n_embd = numbers.n_embd, facts.n_params = numbers.n_params;
  facts.size_bytes = numbers.size_bytes, facts.max_sessions = cfg_.server.max_sessions, facts.path = cfg_.runtime.model_path;
  facts.chat_template = chat ? chat->source() : std::string();
  facts.created = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  const SpecialTokens special = special_tokens(runtime_->model());
  facts.n_batch = runtime_->n_batch();
  facts.bos = special.bos, facts.eos = special.eos, facts.sep = special.sep;
  facts.add_bos = special.add_bos, facts.add_eos = special.add_eos, facts.add_sep = special.add_sep;
  facts.reranker = model_is_reranker(runtime_->model());
  facts.vision = images_ != nullptr;
  facts.rerank_template = rerank_template(runtime_->model());
  facts.fim_pre = special.fim_pre, facts.fim_suf = special.fim_suf, facts.fim_mid = special.fim_mid;
  facts.fim_rep = special.fim_rep, facts.fim_sep = special.fim_sep;
  http_->set_vocabulary(
      [vocab](std::string_view text, bool add_special, bool parse_special, std::vector<std::int32_t>* out) {
        return tokenize_text(vocab, text, *out, parse_special, add_special);
      },
      [vocab](std::int32_t token) { return token_piece(vocab, token); }, std::move(facts),
      images_ ? http_route::CountWithImages([enc = images_.get()](std::string_view prompt, const std::vector<std::string>& images,
                                                                  std::int32_t* n) {
        std::vector<std::pair<std::int64_t, std::int64_t>> sizes;
        for (const std::string& image : images) {
          ImageSize size;
          sniff_image_size(image, &size);  // the edge read every header already
          sizes.emplace_back(size.width, size.height);
        }
        return enc->count(prompt, /*parse_special=*/true, sizes, n);
      })
              : http_route::CountWithImages());
  http_->set_ready(served_name_, std::move(render));
  return 0;
}

void Daemon::shut_down(const std::string& why) {
  if (std::exchange(stopping_, true)) return;
  spdlog::info("{}: shutting down", why);
  supervisor_.stopping(why);
  if (kv_events_) kv_events_->stop();  // gateways see the stream end and send nothing new
  server_.stop_accepting();
  if (http_) http_->stop_accepting();
  serving_.begin_shutdown();
  compute_->request_stop();
}

// SIGTERM with --drain-sec: no new requests (gateways hear `draining` on the KV-event stream and
// move their streams to other agents), those in flight end or move, then the shutdown.
void Daemon::drain(int sig) {
  draining_ = true;
  metrics_.draining.store(1, std::memory_order_relaxed);
  metrics_.drain_in_flight.store(slots_.in_use(), std::memory_order_relaxed);
  spdlog::info("signal {}: draining {} requests in flight for up to {} s", sig, slots_.in_use(), cfg_.drain_sec);
  supervisor_.stopping("draining");
  if (kv_events_) kv_events_->drain();
  if (agent_) agent_->stop();  // out of the cluster view: no gateway routes here again
  server_.stop_accepting();
  if (http_) http_->stop_accepting();
  drain_until_ = std::chrono::steady_clock::now() + std::chrono::seconds(cfg_.drain_sec);
  poll_drained();
}

void Daemon::poll_drained() {
  if (stopping_) return;
  if (slots_.in_use() == 0) return shut_down("drained");
  if (std::chrono::steady_clock::now() >= drain_until_) {
    return shut_down("--drain-sec over with " + std::to_string(slots_.in_use()) + " requests in flight");
  }
  drain_poll_.expires_after(std::chrono::milliseconds(50));
  drain_poll_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec) poll_drained();
  });
}

void Daemon::await_signal() {
  signals_.async_wait([this](const boost::system::error_code& ec, int sig) {
    if (ec) return;
    if (sig != SIGTERM || cfg_.drain_sec == 0 || draining_ || stopping_) return shut_down("signal " + std::to_string(sig));
    drain(sig);
    await_signal();  // a second signal stops at once
  });
}

// Supervised: the agent asks for an unload with SIGUSR1, honoured only while no request is in
// flight. Checked here, on the thread that admits requests, so none slips in between.
void Daemon::await_unload() {
  unload_signal_.async_wait([this](const boost::system::error_code& ec, int) {
    if (ec) return;
    if (slots_.in_use() == 0) return shut_down("unload (idle)");
    spdlog::info("unload asked while {} requests are in flight: serving on", slots_.in_use());
    supervisor_.refused_stop();
    await_unload();
  });
}

void Daemon::watch_signals() {
  await_signal();
  if (!supervisor_.attached()) return;
  unload_signal_.add(SIGUSR1);
  slots_.set_observer([this](std::int32_t n) { supervisor_.in_use(n); });
  await_unload();
}

int Daemon::join_cluster() {
  publish::KvEventConfig kc;
  kc.host = cfg_.http.host;
  kc.port = cfg_.agent_events_port;
  kc.block = cfg_.scheduler.prefix.block;
  kv_events_ = std::make_unique<publish::KvEventServer>(io_, kc, block_journal_, metrics_);
  if (Status st = kv_events_->listen(); !st.ok()) {
    spdlog::error("--agent-events-port: {}", st.to_string());
    return 1;
  }
  publish::AgentConfig ac;
  const std::string hostport = cfg_.http.host + ":" + std::to_string(http_->port());
  ac.id = cfg_.agent_id.empty() ? hostport : cfg_.agent_id;
  ac.address = cfg_.advertise.empty() ? "http://" + hostport : cfg_.advertise;
  ac.events = advertised_host(ac.address, cfg_.http.host) + ":" + std::to_string(kv_events_->port());
  if (Status rs = cfg_.redis.resolve(&ac.redis); !rs.ok()) {
    spdlog::error("{}", rs.to_string());
    return 2;
  }
  ac.model_name = served_name_;
  std::error_code ec;
  ac.model_bytes = catalog_model_ ? static_cast<std::int64_t>(catalog_model_->bytes())
                                  : static_cast<std::int64_t>(std::filesystem::file_size(cfg_.runtime.model_path, ec));
  ac.max_sessions = cfg_.server.max_sessions;
  if (catalog_model_) {
    store::TierStore* ts = &catalog_model_->store();  // outlives the heartbeat (declared before it)
    ac.store_view = [ts, id = cfg_.model_id](cluster::AgentState& a) {
      // Loaded; `tier` says where its bytes would come from again (a restart, an unload).
      if (!a.models.empty()) a.models.front().tier = ts->tier(id);
      a.load_dram_bytes_s = ts->rate_bytes_s(store::Tier::kDram);
      a.load_nvme_bytes_s = ts->rate_bytes_s(store::Tier::kNvme);
      a.load_remote_bytes_s = ts->rate_bytes_s(store::Tier::kRemote);
      a.load_queue_bytes = static_cast<std::int64_t>(ts->queued_bytes());
    };
  }
  agent_ = std::make_unique<publish::AgentHeartbeat>(std::move(ac), metrics_);
  agent_->start();
  kv_events_->start(agent_->boot_id());
  spdlog::info("agent {} heartbeating to redis {} (boot {})", cfg_.agent_id.empty() ? hostport : cfg_.agent_id,
               cfg_.redis.address, agent_->boot_id());
  return 0;
}

}  // namespace uma
