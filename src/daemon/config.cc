#include "daemon/config.h"

#include "cluster/redis_flags.h"

#include "common/secret_file.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <thread>

#include <unistd.h>

namespace uma {
namespace {

// Host memory for evicted prefixes when --prefix-cache-mb is not given: an eighth of the machine's
// memory, at most 8 GiB (llama-server's --cache-ram default). A fixed small default held nothing
// of a large model: one 4000-token prefix of an 8B model is 512 MiB, over the old 256 MiB cap, so on
// a GPU every evicted group prefix was dropped and prefilled again (122 cold prompts where 32 groups
// need 32). An eighth leaves room for several agents on one host and the weights' page cache.
// In a container the machine is what its memory cgroup allows (v2 memory.max, v1
// memory.limit_in_bytes), not the host's RAM that sysconf reports.
std::size_t cgroup_memory_limit() {
  for (const char* path : {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    std::ifstream in(path);
    unsigned long long v = 0;
    if (in >> v && v > 0) return static_cast<std::size_t>(v);  // "max" (no limit) does not parse
  }
  return SIZE_MAX;
}

std::size_t default_prefix_host_bytes() {
  constexpr std::size_t kCap = std::size_t{8} << 30;
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return std::size_t{256} << 20;
  const std::size_t memory = std::min(static_cast<std::size_t>(pages) * static_cast<std::size_t>(page), cgroup_memory_limit());
  return std::min(kCap, memory / 8);
}

}  // namespace

Status parse_daemon_config(int argc, char** argv, DaemonConfig& out, int* exit_code) {
  CLI::App app{"umad: keeps one GGUF model hot and serves many concurrent streams over a Unix socket"};
  app.set_version_flag("--version", "umad 0.1.0");
  app.get_formatter()->column_width(34);

  RuntimeConfig& rt = out.runtime;
  ServerConfig& srv = out.server;
  SchedulerConfig& sc = out.scheduler;
  int max_prompt_bytes = static_cast<int>(srv.limits.max_prompt_bytes);
  int max_frame_bytes = static_cast<int>(srv.limits.max_frame_bytes);
  std::string protocol = "json";
  int max_tx_kib = static_cast<int>(srv.max_tx_bytes / 1024);
  bool mlock = false;
  std::string preempt = "auto";
  std::string prefill_policy = "slo";
  std::string speculative = "lookup";
  bool prefix_cache = true;
  int prefix_cache_mb = 0;
  std::string prefix_hash = "fnv";
  std::string http_listen;
  int http_max_body_kib = static_cast<int>(out.http.max_body_bytes / 1024);
  int preempt_host_mb = static_cast<int>(sc.park_host_bytes >> 20);
  bool mmap = true;

  CLI::Option* model_opt = app.add_option("-m,--model", out.models, "GGUF model file (several: one port serves them "
                 "all, the request's `model` picking one, as with --models-dir)")->envname("UMA_MODEL")
      ->check(CLI::ExistingFile);
  CLI::Option* models_dir_opt = app.add_option("--models-dir", out.models_dir, "serve every *.gguf here, each loaded on "
                 "its first request (by its file name, with or without .gguf) and unloaded after --keep-alive idle "
                 "or for room (--max-models, --models-mb); HTTP only")->envname("UMA_MODELS_DIR")->check(CLI::ExistingDirectory);
  app.add_option("--max-models", out.max_models, "with several models: loaded at once at most")
      ->envname("UMA_MAX_MODELS")->capture_default_str()->check(CLI::Range(1, 1024));
  app.add_option("--models-mb", out.models_mb, "with several models: their file bytes loaded at once at most (0: no limit)")
      ->envname("UMA_MODELS_MB")->capture_default_str();
  app.add_option("--keep-alive", out.keep_alive, "with several models: an idle model is unloaded after this "
                 "(seconds or \"5m\", \"1h\"; -1: never); a request's `keep_alive` sets its model's")
      ->envname("UMA_KEEP_ALIVE")->capture_default_str();
  CLI::Option* model_id_opt = app.add_option("--model-id", out.model_id, "a catalog model (uma-store add), loaded "
                 "through the model store from --store-dir or its URL, every chunk verified (docs/STORE.md)")
      ->envname("UMA_MODEL_ID");
  model_opt->excludes(model_id_opt);
  models_dir_opt->excludes(model_id_opt);
  app.add_option("--store-dir", out.store_dir, "the model store's NVMe tier: a directory of models (with --model-id)")
      ->envname("UMA_STORE_DIR");
  std::uint64_t store_nvme_mb = 0, store_dram_mb = 0;
  app.add_option("--store-nvme-mb", store_nvme_mb, "--store-dir holds at most this much (LRU; 0: no limit)")
      ->envname("UMA_STORE_NVME_MB")->capture_default_str();
  app.add_option("--store-dram-mb", store_dram_mb, "model images kept in host memory when unused (LRU)")
      ->envname("UMA_STORE_DRAM_MB")->capture_default_str();
  rt.n_ctx = 0;
  app.add_option("--n-ctx", rt.n_ctx, "KV cells of all sessions together (per-seq KV: n-ctx / --max-sessions each); 0: "
                 "each request's room the model's trained context, or the largest whose KV fits --kv-mb (said in the start line)")
      ->envname("UMA_N_CTX")->capture_default_str()->check(CLI::Range(0, 1 << 20));
  std::int64_t kv_mb = -1;
  app.add_option("--kv-mb", kv_mb, "the KV budget (MiB) --n-ctx 0 sizes the context by, and that an explicit --n-ctx must "
                 "fit; -1: half of available host memory on a CPU, 85% of free GPU memory less 512 MiB on a GPU")
      ->envname("UMA_KV_MB")->capture_default_str()->check(CLI::Range(static_cast<std::int64_t>(-1), static_cast<std::int64_t>(1) << 30));
  app.add_option("--n-batch", rt.n_batch, "most tokens in one decode: a burst of prompts while nobody decodes, and "
                 "on a GPU a tick beside decoding streams (0: 2048)")->envname("UMA_N_BATCH")
      ->capture_default_str()->check(CLI::Range(0, 1 << 16));
  app.add_option("--n-ubatch", rt.n_ubatch, "most tokens in one pass of llama.cpp (caps a tick with streams decoding "
                 "on the CPU)")
      ->envname("UMA_N_UBATCH")->capture_default_str()->check(CLI::Range(1, 1 << 16));
  std::string threads = "auto";
  app.add_option("-t,--threads", threads, "compute threads: auto (as many as the cores this process may use that "
                 "others leave free, measured as it serves), N (fixed), or 0 (every core it may use, fixed)")
      ->envname("UMA_THREADS")->capture_default_str()
      ->check([](const std::string& v) -> std::string {
        if (v == "auto") return "";
        try {
          std::size_t used = 0;
          const int n = std::stoi(v, &used);
          if (used == v.size() && n >= 0 && n <= 1024) return "";
        } catch (const std::exception&) {
        }
        return "auto or a number of threads from 0 to 1024";
      });
  app.add_option("-s,--socket", srv.socket_path, "Unix socket path (created with mode 0600)")->envname("UMA_SOCK")
      ->capture_default_str();
  app.add_flag("--mmap,!--no-mmap", mmap, "memory-map the model file (default on)")->envname("UMA_MMAP");
  app.add_option("--flash-attn", rt.flash_attn, "flash attention: on, off or auto (llama.cpp decides; off on CPU-only builds with a unified KV)")
      ->envname("UMA_FLASH_ATTN")->capture_default_str()->check(CLI::IsMember({"on", "off", "auto"}));
  app.add_flag("--mlock,!--no-mlock", mlock, "lock the model in RAM (default off)")->envname("UMA_MLOCK");
  app.add_flag("--host-copy,!--no-host-copy", rt.host_copy, "a model file in host memory (tmpfs, a memfd: the agent's "
               "DRAM tier) reaches the GPU by a pinned copy, not llama.cpp's upload of its mapping (default on)")
      ->envname("UMA_HOST_COPY");
  app.add_option("--gpu-layers", rt.n_gpu_layers, "layers (weights and KV) on the GPU: -1 all when llama.cpp has a GPU "
                 "backend (UMA_GPU=cuda scripts/setup.sh), 0 none")
      ->envname("UMA_GPU_LAYERS")->capture_default_str()->check(CLI::Range(-1, 100000));
  app.add_option("--deep-pass-row-cells", rt.deep_pass_row_cells, "per-seq KV: a sequence deeper than the others by "
                 "this many cells times their number decodes in a pass of its own; -1: 2048 on a CPU, never on a GPU; 0: never")
      ->capture_default_str()->check(CLI::Range(static_cast<std::int64_t>(-1), static_cast<std::int64_t>(1) << 40))->envname("UMA_DEEP_PASS_ROW_CELLS");
  app.add_option("--kv-layout", rt.kv_layout, "KV cache: unified (one pool; a request may use all of n-ctx), per-seq "
                 "(n-ctx / sessions each; attention spans a sequence's own cells) or auto (per-seq with more than one session)")
      ->envname("UMA_KV_LAYOUT")->capture_default_str()->check(CLI::IsMember({"auto", "unified", "per-seq"}));
  app.add_option("--backend-sampling", rt.backend_sampling, "greedy requests sampled on the device, in the decode's "
                 "graph (only token ids reach the host): on, off or auto (on where the output layer is on a GPU)")
      ->envname("UMA_BACKEND_SAMPLING")->capture_default_str()->check(CLI::IsMember({"on", "off", "auto"}));
  app.add_option("--max-sessions", srv.max_sessions, "concurrent sessions (= KV sequences)")->envname("UMA_MAX_SESSIONS")
      ->capture_default_str()->check(CLI::Range(1, 256));
  app.add_option("--max-connections", srv.max_connections, "open connections per front end (the Unix socket; HTTP too), sessions or not; more are closed at once")
      ->envname("UMA_MAX_CONNECTIONS")->capture_default_str()->check(CLI::Range(1, 65536));
  CLI::Option* prompt_opt = app.add_option("--max-prompt-bytes", max_prompt_bytes, "largest prompt in bytes (default: "
                 "from the context, n_ctx per request x 8, at least 64 KiB)")->envname("UMA_MAX_PROMPT_BYTES")
      ->capture_default_str()->check(CLI::Range(1, 64 << 20));
  app.add_option("--max-tokens", sc.max_tokens_cap,
                 "the most tokens one reply generates; a request asking for more gets this many (0: no cap "
                 "but the context)")
      ->envname("UMA_MAX_TOKENS")->capture_default_str()->check(CLI::Range(0, 1 << 30));
  app.add_option("--default-max-tokens", sc.default_max_tokens,
                 "tokens generated when a request names no max_tokens (0: until end of generation, a stop "
                 "string or the context's end)")
      ->envname("UMA_DEFAULT_MAX_TOKENS")->capture_default_str()->check(CLI::Range(0, 1 << 30));
  app.add_option("--kv-watermark", sc.kv_watermark,
                 "share of the KV cells kept free when starting or resuming a request, for running ones to grow "
                 "into before anyone is paused")
      ->envname("UMA_KV_WATERMARK")->capture_default_str()->check(CLI::Range(0.0, 0.5));
  app.add_option("--protocol", protocol, "wire protocol: json (length-prefixed frames) or newline")
      ->envname("UMA_PROTOCOL")->capture_default_str()->check(CLI::IsMember({"json", "newline"}));
  CLI::Option* frame_opt = app.add_option("--max-frame-bytes", max_frame_bytes, "largest JSON frame accepted (checked from "
                 "its header; default: from the prompt limit)")
      ->envname("UMA_MAX_FRAME_BYTES")->capture_default_str()->check(CLI::Range(64, 256 << 20));
  app.add_option("--max-tx-kib", max_tx_kib, "unsent reply bytes per session before a slow reader is dropped (KiB)")
      ->envname("UMA_MAX_TX_KIB")->capture_default_str()->check(CLI::Range(4, 1 << 20));
  app.add_option("--idle-timeout-sec", srv.idle_timeout_sec, "close idle connections after this long (0: never)")
      ->envname("UMA_IDLE_TIMEOUT_SEC")->capture_default_str()->check(CLI::Range(0, 1 << 24));
  app.add_option("--slo-ttft-ms", sc.slo_ttft_ms, "time-to-first-token target (ms)")->envname("UMA_SLO_TTFT_MS")
      ->capture_default_str()->check(CLI::Range(1.0, 1e7));
  app.add_option("--slo-tbt-ms", sc.slo_tbt_ms, "inter-token target (ms); the latency guard's deadline")
      ->envname("UMA_SLO_TBT_MS")->capture_default_str()->check(CLI::Range(1.0, 1e7));
  app.add_option("--max-queue", sc.max_queue, "requests waiting at most, for a session (more: E_LIMIT_SESSIONS, 429; none in an agent) and for KV room (more: E_OVERLOADED)")
      ->envname("UMA_MAX_QUEUE")->capture_default_str()->check(CLI::Range(0, 1 << 20));
  app.add_option("--max-queue-ms", sc.max_queue_ms, "a request waiting longer for a session or for KV room is refused")
      ->envname("UMA_MAX_QUEUE_MS")->capture_default_str()->check(CLI::Range(1.0, 1e9));
  app.add_option("--background-max-wait-ms", sc.background_max_wait_ms,
                 "background requests: default TTFT target, and most time paused in all; past either they "
                 "rank as interactive")
      ->envname("UMA_BACKGROUND_MAX_WAIT_MS")->capture_default_str()->check(CLI::Range(1.0, 1e9));
  app.add_option("--tenant-max-requests", sc.tenant_max_requests,
                 "requests in flight per metadata.tenant (0: no cap); more get E_OVERLOADED")
      ->envname("UMA_TENANT_MAX_REQUESTS")->capture_default_str()->check(CLI::Range(0, 1 << 20));
  app.add_option("--preempt", preempt, "pausing background sessions for interactive ones: auto (save KV to host "
                 "memory or recompute, whichever is cheaper), save, recompute, off")
      ->envname("UMA_PREEMPT")->capture_default_str()->check(CLI::IsMember({"auto", "save", "recompute", "off"}));
  app.add_option("--preempt-host-mb", preempt_host_mb, "host memory for the saved KV of paused sessions (MiB)")
      ->envname("UMA_PREEMPT_HOST_MB")->capture_default_str()->check(CLI::Range(0, 1 << 24));
  CLI::Option* min_prefill = app.add_option("--min-prefill", sc.min_prefill,
                 "prompt tokens every tick may prefill next to running streams, at least (smaller: steadier "
                 "streams, slower long prompts; raised where a prefill tick has a measured fixed cost). "
                 "Default 8 with a unified KV, n-ubatch with per-sequence KV (the GPU default)")
      ->envname("UMA_MIN_PREFILL")->capture_default_str()->check(CLI::Range(1, 1 << 16));
  app.add_option("--prefill-policy", prefill_policy, "how many prompt tokens a tick carries: slo (the worst of the "
                 "streams' gap and the waiting prompts' TTFT, each over its target, minimised with the tick cost "
                 "model; when every target can be met, the fullest tick that meets them), slo-balance (the worst "
                 "ratio minimised even then) or gap (the streams' gap alone, with the overdue guard)")
      ->envname("UMA_PREFILL_POLICY")->capture_default_str()->check(CLI::IsMember({"slo", "slo-balance", "gap"}));
  app.add_option("--prompt-chunks-max", sc.prompt_chunks_max, "a prompt is prefilled in at most this many chunks "
                 "(0: no bound)")->envname("UMA_PROMPT_CHUNKS_MAX")->capture_default_str()->check(CLI::Range(0, 1 << 16));
  app.add_option("--ttft-solo-factor", sc.ttft_solo_factor, "a prompt's TTFT target: --slo-ttft-ms plus this many "
                 "times the predicted prefill of its prompt and of those that arrived before it")->envname("UMA_TTFT_SOLO_FACTOR")->capture_default_str()
      ->check(CLI::Range(0.0, 100.0));
  app.add_option("--speculative", speculative, "speculative decoding for requests that do not say: lookup (drafts "
                 "from the prompt and output so far, else from --draft-model when given, verified in the batch when "
                 "the tick cost model says it pays) or off")->envname("UMA_SPECULATIVE")->capture_default_str()->check(CLI::IsMember({"lookup", "off"}));
  app.add_option("--draft-max", sc.draft_max, "draft tokens one request verifies in a tick, at most (0: no "
                 "speculation)")->envname("UMA_DRAFT_MAX")->capture_default_str()->check(CLI::Range(0, 64));
  app.add_option("--draft-model", out.draft_model, "a small model with the served model's vocabulary that drafts "
                 "tokens for speculative decoding where prompt lookup finds none")->envname("UMA_DRAFT_MODEL")
      ->check(CLI::ExistingFile);
  app.add_flag("--pipelined-ticks,!--no-pipelined-ticks", sc.pipelined_ticks, "on a GPU, launch the next decode "
               "before the last one's tokens become text and events (default on)")->envname("UMA_PIPELINED_TICKS");
  // Tests only: every draft found is verified, whatever the cost model says.
  app.add_flag("--speculative-force", sc.speculate_always)->group("");
  // Benchmarks only: the stream count from which speculation's plans stop giving every stream equal drafts.
  app.add_option("--spec-uniform-below", sc.spec_uniform_streams_below)->envname("UMA_SPEC_UNIFORM_BELOW")
      ->check(CLI::Range(0, 1 << 16))->group("");
  app.add_flag("--prefix-cache,!--no-prefix-cache", prefix_cache,
               "reuse the KV of earlier prompts' shared prefixes (default on)")->envname("UMA_PREFIX_CACHE");
  app.add_option("--prefix-cache-seqs", sc.prefix.max_kept, "finished sequences kept in the KV cache for reuse")
      ->envname("UMA_PREFIX_CACHE_SEQS")->capture_default_str()->check(CLI::Range(0, 128));
  app.add_option("--prefix-cache-idle-ms", sc.prefix.idle_ms, "unified KV: a kept sequence unused this long moves to "
                 "host memory (idle cells slow every decode there; per-sequence KV keeps them until room is needed)")
      ->envname("UMA_PREFIX_CACHE_IDLE_MS")->capture_default_str()->check(CLI::Range(0.0, 1e9));
  auto* prefix_mb = app.add_option("--prefix-cache-mb", prefix_cache_mb, "host memory for prefix snapshots evicted from "
                                   "the KV cache (MiB; default: an eighth of the machine's memory, at most 8192)")
      ->envname("UMA_PREFIX_CACHE_MB")->check(CLI::Range(0, 1 << 24));
  // Tests only: a hash under which every block collides, to prove hits are confirmed by tokens.
  app.add_option("--prefix-hash", prefix_hash)->group("")->check(CLI::IsMember({"fnv", "weak"}));
  // Tests only: the model load takes this much longer, so "loading" states can be observed.
  app.add_option("--test-load-delay-ms", out.test_load_delay_ms)->group("")->check(CLI::Range(0, 60000));
  app.add_option("--http", http_listen, "serve the OpenAI-compatible HTTP API on HOST:PORT (or PORT: loopback); "
                 "off unless given")->envname("UMA_HTTP");
  std::string http_hosts;
  int http_port = -1;
  app.add_option("--host", http_hosts, "llama-server's form of --http: serve HTTP on these addresses, comma-separated "
                 "(with several, an IPv6 one binds IPv6 only: 0.0.0.0,:: is both families; default 127.0.0.1)")
      ->envname("UMA_HTTP_HOST");
  app.add_option("--port", http_port, "with --host (or alone): the HTTP port (default 8080; 0: any free one)")
      ->envname("UMA_HTTP_PORT")->check(CLI::Range(0, 65535));
  app.add_flag("--agent", out.agent, "cluster agent: heartbeat this daemon's state to Redis every second "
               "(needs --http)")->envname("UMA_AGENT");
  cluster::add_redis_flags(app, out.redis);
  app.add_option("--agent-id", out.agent_id, "this agent's id in the cluster (default: the --http address)")
      ->envname("UMA_AGENT_ID");
  app.add_option("--advertise", out.advertise, "the base URL gateways reach this agent at (default: "
                 "http://HOST:PORT of --http)")->envname("UMA_ADVERTISE");
  app.add_option("--agent-events-port", out.agent_events_port, "the agent's KV-event stream (GET /kv-events) on "
                 "this port of the --http host; 0: any free one, advertised in its heartbeat")
      ->envname("UMA_AGENT_EVENTS_PORT")->capture_default_str();
  app.add_option("--calibrate-ms,--agent-calibrate-ms", out.agent_calibrate_ms, "time prompt chunks and decode steps "
                 "for up to this long at start, while idle (the first request ends it): the tick cost model's first "
                 "samples; an agent calibrates before its first heartbeat, whose prefill rate gateways route by; 0: none")
      ->envname("UMA_CALIBRATE_MS")->capture_default_str()->check(CLI::Range(0, 60000));
  app.add_option("--http-timeout-sec", out.http.timeout_sec, "a request must arrive whole within this; idle "
                 "keep-alive connections close after it")
      ->envname("UMA_HTTP_TIMEOUT_SEC")->capture_default_str()->check(CLI::Range(1, 3600));
  CLI::Option* body_opt = app.add_option("--http-max-body-kib", http_max_body_kib, "largest HTTP request body (KiB; default: "
                 "from the prompt limit); more is 413")
      ->envname("UMA_HTTP_MAX_BODY_KIB")->capture_default_str()->check(CLI::Range(1, 1 << 20));
  std::string api_key_file;
  app.add_option("--api-key-file", api_key_file, "the HTTP API's key (first line of the file): every request but "
                 "GET /health needs 'Authorization: Bearer KEY' (or x-api-key: KEY)")->envname("UMA_API_KEY_FILE")->check(CLI::ExistingFile);
  std::string api_key;
  app.add_option("--api-key", api_key, "the HTTP API's key itself (as llama-server's and vLLM's --api-key; a file "
                 "keeps it out of the process list)")->envname("UMA_API_KEY");
  app.add_option("--cors-origin", out.http.cors_origin, "browsers may call the HTTP API from this origin ('*': any, "
                 "the default as llama-server's; '': none): Access-Control-Allow-* headers, OPTIONS preflights answered "
                 "without the key")->envname("UMA_CORS_ORIGIN")->capture_default_str();
  bool no_slots = false, no_metrics = false;
  app.add_flag("--no-slots", no_slots, "GET /slots answers 501 (llama-server's --no-slots)")->envname("UMA_NO_SLOTS");
  bool no_webui = false;
  app.add_flag("--no-webui", no_webui, "no web page (a chat and a status view) at GET /")->envname("UMA_NO_WEBUI");
  app.add_flag("--no-metrics", no_metrics, "GET /metrics over HTTP answers 501 (the socket's metrics stay)")
      ->envname("UMA_NO_METRICS");
  app.add_flag("--strict-fields", out.http.limits.strict_fields, "a request field umad does not know is a 400 (by "
               "default it is ignored, named in X-Uma-Ignored-Fields and counted)")->envname("UMA_STRICT_FIELDS");
  app.add_option("--alias", out.alias, "the model's name in /v1/models and the cluster (default: --model-id, else "
                 "the model file's name)")->envname("UMA_ALIAS");
  app.add_option("--status-fd", out.status_fd, "run under a supervisor (uma-agent): JSON status lines on this "
                 "inherited descriptor; SIGUSR1 stops the daemon if no request is in flight")->group("")
      ->check(CLI::Range(3, 1 << 20));
  app.add_option("--drain-sec", out.drain_sec, "SIGTERM drains: no new requests (with --agent the gateways move the "
                 "streams here to other agents serving the model), those in flight end, for up to this long, then the "
                 "daemon stops; 0: SIGTERM ends open streams with an error at once (SIGINT always does)")
      ->envname("UMA_DRAIN_SEC")->capture_default_str()->check(CLI::Range(0, 86400));
  app.add_option("--reasoning-format", out.reasoning_format, "a thinking model's reasoning: auto / deepseek (apart, "
                 "as reasoning_content), deepseek-legacy, or none (left in the content)")
      ->envname("UMA_REASONING_FORMAT")->capture_default_str()->check(CLI::IsMember({"auto", "deepseek", "deepseek-legacy", "none"}));
  std::string reasoning = "auto";
  app.add_option("--reasoning", reasoning, "on / off: whether a thinking template thinks when a request does not say "
                 "(off: an empty think block, as llama-server's --reasoning off); auto: the template's default")
      ->envname("UMA_REASONING")->capture_default_str()->check(CLI::IsMember({"on", "off", "auto"}));
  app.add_option("--chat-template", out.chat_template, "chat template for /v1/chat/completions: a Jinja template text or a "
                 "llama.cpp name (chatml, llama3, ...); default: the model's")->envname("UMA_CHAT_TEMPLATE");
  app.add_option("--gather-ms", sc.gather_max_ms, "before a tick that would only prefill, wait at most this long "
                 "(and 1% of that tick's predicted time) for the rest of a burst of arrivals (0: never)")
      ->capture_default_str()->check(CLI::Range(0.0, 1000.0))->envname("UMA_GATHER_MS");
  app.add_option("--tick-ms", sc.tick_target_ms, "decode time per tick the budget adapts toward (ms)")
      ->envname("UMA_TICK_MS")->capture_default_str()->check(CLI::Range(1.0, 10000.0));
  app.add_option("--temperature", srv.limits.sampling.temperature, "default sampling temperature (0: greedy)")
      ->envname("UMA_TEMPERATURE")->capture_default_str()->check(CLI::Range(0.0, 100.0));
  app.add_option("--seed", srv.limits.sampling.seed, "default sampling seed (with --temperature > 0)")
      ->envname("UMA_SEED");
  app.footer("Environment: UMA_DEBUG=1 turns on debug traces (tick composition, session states, I/O); "
             "UMA_DEBUG=2 adds llama.cpp's own debug log.\n"
             "Protocol: framed JSON by default (uint32_le length | JSON request; token/eos/error events back;\n"
             "{\"type\":\"metrics\"} for metrics); --protocol newline: one prompt line in, one reply line out,\n"
             "'/metrics' for metrics. See docs/PROTOCOL.md.");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    *exit_code = app.exit(e);
    return e.get_exit_code() == 0 ? Status::Ok() : Status(ErrorCode::kInvalidArgument, e.what());
  }
  rt.use_mmap = mmap;
  rt.use_mlock = mlock;
  out.min_prefill_given = min_prefill->count() > 0;
  if (out.min_prefill_given) sc.per_seq_min_prefill = sc.min_prefill;  // asked for: both layouts
  if (out.min_prefill_given) sc.measured_prefill_floor = false;       // and not raised to the measured knee
  sc.prefix.enabled = prefix_cache;
  sc.prefix.host_bytes = prefix_mb->count() > 0 ? static_cast<std::size_t>(prefix_cache_mb) << 20
                                                : default_prefix_host_bytes();
  if (prefix_hash == "weak") sc.prefix.hash = [](std::uint64_t, std::span<const Token>) -> std::uint64_t { return 42; };
  if (kv_mb >= 0) rt.kv_budget_bytes = kv_mb << 20;
  // The layout is settled here, for the sequence count follows it. Per-sequence KV: a stream per
  // session and nothing more; a kept prefix stays in the stream it ran in (its session's, free
  // until a start needs it), so the prefix cache holds no memory the sessions do not. Unified: ids
  // cost nothing, kept prefixes take ids beyond the sessions' and cells of the one pool (llama.cpp
  // allows 256 ids in all).
  const bool per_seq = rt.kv_layout == "per-seq" || (rt.kv_layout == "auto" && srv.max_sessions > 1);
  rt.kv_layout = per_seq ? "per-seq" : "unified";
  if (!prefix_cache) sc.prefix.max_kept = 0;
  sc.prefix.max_kept = std::min(sc.prefix.max_kept, 256 - srv.max_sessions);
  rt.n_seq_max = per_seq ? srv.max_sessions : srv.max_sessions + sc.prefix.max_kept;
  rt.n_seq_sampling = srv.max_sessions;
  // llama.cpp reserves an output row per sequence in a batch: fewer rows than sequences aborts
  // inside it at context creation. Adjusted and said, as a bad combination must never crash.
  for (auto [flag, n] : {std::pair{"n-batch", &rt.n_batch}, std::pair{"n-ubatch", &rt.n_ubatch}}) {
    if (*n > 0 && *n < rt.n_seq_max) {
      std::cerr << "umad: --" << flag << " " << *n << " is below the " << rt.n_seq_max << " sequences (--max-sessions "
                << srv.max_sessions << (per_seq ? "" : " + " + std::to_string(sc.prefix.max_kept) + " kept prefixes")
                << "): " << flag << " raised to " << rt.n_seq_max << "\n";
      *n = rt.n_seq_max;
    }
  }
  if (!http_hosts.empty() || http_port >= 0) {
    Status st = !http_listen.empty() ? Status(ErrorCode::kInvalidArgument, "--http, or --host and --port: not both")
                                     : parse_http_hosts(http_hosts, http_port, &out.http);
    if (!st.ok()) {
      std::cerr << "umad: " << st.message() << "\n";
      *exit_code = 2;
      return st;
    }
    out.http_enabled = true;
  } else if (!http_listen.empty()) {
    out.http_enabled = true;
    const auto colon = http_listen.rfind(':');
    const std::string port = colon == std::string::npos ? http_listen : http_listen.substr(colon + 1);
    if (colon != std::string::npos && colon > 0) out.http.host = http_listen.substr(0, colon);
    char* end = nullptr;
    const long p = std::strtol(port.c_str(), &end, 10);
    if (port.empty() || *end != '\0' || p < 0 || p > 65535) {
      std::cerr << "umad: --http wants HOST:PORT or PORT, got '" << http_listen << "'\n";
      *exit_code = 2;
      return Status(ErrorCode::kInvalidArgument, "bad --http");
    }
    out.http.port = static_cast<std::uint16_t>(p);
  }
  if (out.models.size() == 1) rt.model_path = out.models.front();
  if (out.router() && (!out.http_enabled || out.agent)) {
    std::cerr << "umad: several models (--models-dir, or --model more than once) are served over --http, and not as a "
                 "cluster agent (uma-agent is that)\n";
    *exit_code = 2;
    return Status(ErrorCode::kInvalidArgument, "several models need --http");
  }
  if (out.router() && !out.http.more_hosts.empty()) {
    std::cerr << "umad: several models are served on one --host address\n";
    *exit_code = 2;
    return Status(ErrorCode::kInvalidArgument, "several models on several addresses");
  }
  if (rt.model_path.empty() && out.model_id.empty() && !out.router()) {
    std::cerr << "umad: --model FILE, --models-dir DIR or --model-id ID is required\n";
    *exit_code = 2;
    return Status(ErrorCode::kInvalidArgument, "no model");
  }
  out.store_nvme_bytes = store_nvme_mb << 20;
  out.store_dram_bytes = store_dram_mb << 20;
  if (!out.model_id.empty()) rt.model_path = out.model_id;  // its name from here on
  if (out.agent && !out.http_enabled) {
    std::cerr << "umad: --agent needs --http (gateways reach agents over HTTP)\n";
    *exit_code = 2;
    return Status(ErrorCode::kInvalidArgument, "--agent needs --http");
  }
  out.prompt_limit_given = prompt_opt->count() > 0 || std::getenv("UMA_MAX_PROMPT_BYTES") != nullptr;
  out.frame_limit_given = frame_opt->count() > 0 || std::getenv("UMA_MAX_FRAME_BYTES") != nullptr;
  out.body_limit_given = body_opt->count() > 0 || std::getenv("UMA_HTTP_MAX_BODY_KIB") != nullptr;
  srv.limits.max_prompt_bytes = static_cast<std::size_t>(max_prompt_bytes);
  srv.limits.max_frame_bytes = static_cast<std::size_t>(max_frame_bytes);
  srv.protocol = protocol == "newline" ? ProtocolKind::kNewline : ProtocolKind::kJson;
  srv.max_tx_bytes = static_cast<std::size_t>(max_tx_kib) * 1024;
  sc.preemption = preempt != "off";
  sc.slo_prefill = prefill_policy != "gap";
  sc.slo_fill = prefill_policy == "slo";
  sc.speculate = speculative == "lookup";
  // A speculating request verifies its drafts on the device too (greedy): K + 1 rows per sequence.
  rt.outputs_per_seq = sc.speculate || !out.draft_model.empty() ? sc.draft_max + 1 : 1;
  // And its verifying ticks' rows are reserved at start on a GPU (where growing the page-locked
  // output buffer mid-serving cost a tick 50 ms): 256 rows, 0.65 GB at a 128k vocabulary.
  rt.verify_outputs = sc.speculate || !out.draft_model.empty() ? 256 : 0;
  sc.park = preempt == "save" ? ParkPreference::kSave : preempt == "recompute" ? ParkPreference::kRecompute : ParkPreference::kAuto;
  sc.park_host_bytes = static_cast<std::size_t>(preempt_host_mb) << 20;
  // Page-locked at start for what may be snapshotted: kept prefixes and paused requests' KV.
  rt.kv_host_arena_bytes = std::min<std::uint64_t>(
      rt.kv_host_arena_bytes, (sc.prefix.enabled ? sc.prefix.host_bytes : 0) + (sc.preemption && sc.park != ParkPreference::kRecompute ? sc.park_host_bytes : 0));
  out.http.max_body_bytes = static_cast<std::size_t>(http_max_body_kib) * 1024;
  if (reasoning != "auto") out.reasoning = reasoning == "on";
  out.http.slots_endpoint = !no_slots;
  out.http.webui = !no_webui;
  out.http.metrics_endpoint = !no_metrics;
  if (!api_key.empty() && !api_key_file.empty()) {
    std::cerr << "umad: --api-key and --api-key-file: give one\n";
    *exit_code = 2;
    return Status(ErrorCode::kInvalidArgument, "--api-key and --api-key-file both given");
  }
  out.http.api_key = api_key;
  if (!api_key_file.empty()) {
    if (Status ks = read_secret_file(api_key_file, "API key", &out.http.api_key); !ks.ok()) {
      std::cerr << "umad: --api-key-file: " << ks.message() << "\n";
      *exit_code = 2;
      return ks;
    }
  }
  out.http.max_connections = srv.max_connections;
  out.http.max_tx_bytes = srv.max_tx_bytes;
  out.http.limits.max_prompt_bytes = srv.limits.max_prompt_bytes;
  out.http.default_sampling = srv.limits.sampling;
  if (srv.socket_path.empty()) {
    std::cerr << "umad: --socket must not be empty\n";
    *exit_code = 2;
    return Status(ErrorCode::kInvalidArgument, "--socket must not be empty");
  }
  out.threads_auto = threads == "auto";
  rt.n_threads = out.threads_auto ? 0 : std::stoi(threads);  // 0: every core the process may use (the daemon counts them)
  const char* debug = std::getenv("UMA_DEBUG");
  out.debug = debug != nullptr && std::string(debug) != "0" && std::string(debug) != "";
  out.trace = debug != nullptr && std::string(debug) == "2";
  *exit_code = -1;  // keep running
  return Status::Ok();
}

RequestLimits derive_request_limits(std::int32_t n_ctx_seq, const DaemonConfig& cfg) {
  constexpr std::size_t kKiB = 1024;
  RequestLimits l{cfg.server.limits.max_prompt_bytes, cfg.server.limits.max_frame_bytes, cfg.http.max_body_bytes};
  if (!cfg.prompt_limit_given) l.max_prompt_bytes = std::max<std::size_t>(64 * kKiB, static_cast<std::size_t>(std::max(0, n_ctx_seq)) * 8);
  const std::size_t room = std::max<std::size_t>(1024 * kKiB, 2 * l.max_prompt_bytes + 64 * kKiB);
  if (!cfg.frame_limit_given) l.max_frame_bytes = room;
  if (!cfg.body_limit_given) l.max_body_bytes = room;
  return l;
}

}  // namespace uma
