#include "daemon/daemon_flags.h"

#include <CLI/CLI.hpp>

#include <stdexcept>

#include "cluster/redis_flags.h"
#include "runtime/context_size.h"

namespace uma {

DaemonFlags::DaemonFlags()
    : max_prompt_bytes(static_cast<int>(config.server.limits.max_prompt_bytes)),
      max_frame_bytes(static_cast<int>(config.server.limits.max_frame_bytes)),
      max_tx_kib(static_cast<int>(config.server.max_tx_bytes / 1024)),
      http_max_body_kib(static_cast<int>(config.http.max_body_bytes / 1024)),
      preempt_host_mb(static_cast<int>(config.scheduler.park_host_bytes >> 20)) {
  config.runtime.n_ctx = 0;  // umad's default: the model's trained context, or what fits
}

namespace {

void add_model_flags(CLI::App& app, DaemonFlags& f) {
  DaemonConfig& c = f.config;
  const char* group = "Model";
  CLI::Option* model = app.add_option("-m,--model", c.models, "GGUF model file (several: one port serves them "
                 "all, the request's `model` picking one, as with --models-dir)")->envname("UMA_MODEL")
      ->check(CLI::ExistingFile)->group(group);
  CLI::Option* models_dir = app.add_option("--models-dir", c.models_dir, "serve every *.gguf here, each loaded on "
                 "its first request (by its file name, with or without .gguf) and unloaded after --keep-alive idle "
                 "or for room (--max-models, --models-mb); HTTP only")->envname("UMA_MODELS_DIR")->check(CLI::ExistingDirectory)->group(group);
  app.add_option("--max-models", c.max_models, "with several models: loaded at once at most")
      ->envname("UMA_MAX_MODELS")->capture_default_str()->check(CLI::Range(1, 1024))->group(group);
  app.add_option("--models-mb", c.models_mb, "with several models: their file bytes loaded at once at most (0: no limit)")
      ->envname("UMA_MODELS_MB")->capture_default_str()->group(group);
  app.add_option("--keep-alive", c.keep_alive, "with several models: an idle model is unloaded after this "
                 "(seconds or \"5m\", \"1h\"; -1: never); a request's `keep_alive` sets its model's")
      ->envname("UMA_KEEP_ALIVE")->capture_default_str()->group(group);
  CLI::Option* model_id = app.add_option("--model-id", c.model_id, "a catalog model (uma-store add), loaded "
                 "through the model store from --store-dir or its URL, every chunk verified (docs/STORE.md)")
      ->envname("UMA_MODEL_ID")->group(group);
  app.add_option("--alias", c.alias, "the model's name in /v1/models and the cluster (default: --model-id, else "
                 "the model file's name)")->envname("UMA_ALIAS")->group(group);
  app.add_option("--chat-template", c.chat_template, "chat template for /v1/chat/completions: a Jinja template text or a "
                 "llama.cpp name (chatml, llama3, ...); default: the model's")->envname("UMA_CHAT_TEMPLATE")->group(group);
  app.add_option("--reasoning-format", c.reasoning_format, "a thinking model's reasoning: auto / deepseek (apart, "
                 "as reasoning_content), deepseek-legacy, or none (left in the content)")
      ->envname("UMA_REASONING_FORMAT")->capture_default_str()->check(CLI::IsMember({"auto", "deepseek", "deepseek-legacy", "none"}))->group(group);
  app.add_option("--reasoning", f.reasoning, "on / off: whether a thinking template thinks when a request does not say "
                 "(off: an empty think block, as llama-server's --reasoning off); auto: the template's default")
      ->envname("UMA_REASONING")->capture_default_str()->check(CLI::IsMember({"on", "off", "auto"}))->group(group);
  CLI::Option* mmproj = app.add_option("--mmproj", c.mmproj, "a vision projector for the model (a GGUF that "
                 "llama.cpp's libmtmd reads, as llama-server's --mmproj): chat, Anthropic, Ollama and /completion "
                 "prompts may then carry images, as data URLs or base64")->envname("UMA_MMPROJ")->check(CLI::ExistingFile)->group(group);
  app.add_option("--image-cache-mb", f.image_cache_mb, "with --mmproj: the embeddings of recent images kept, so an "
                 "image sent again (a conversation's next turn) is not encoded again (MiB; 0: none)")
      ->envname("UMA_IMAGE_CACHE_MB")->capture_default_str()->check(CLI::Range(0, 1 << 20))->group(group);
  model->excludes(model_id);
  models_dir->excludes(model_id);
  mmproj->excludes(models_dir);
}

void add_store_flags(CLI::App& app, DaemonFlags& f) {
  DaemonConfig& c = f.config;
  const char* group = "Model store";
  app.add_option("--store-dir", c.store_dir, "the model store's NVMe tier: a directory of models (with --model-id)")
      ->envname("UMA_STORE_DIR")->group(group);
  app.add_option("--store-nvme-mb", f.store_nvme_mb, "--store-dir holds at most this much (LRU; 0: no limit)")
      ->envname("UMA_STORE_NVME_MB")->capture_default_str()->group(group);
  app.add_option("--store-dram-mb", f.store_dram_mb, "model images kept in host memory when unused (LRU)")
      ->envname("UMA_STORE_DRAM_MB")->capture_default_str()->group(group);
}

void add_context_flags(CLI::App& app, DaemonFlags& f) {
  DaemonConfig& c = f.config;
  RuntimeConfig& rt = f.config.runtime;
  const char* group = "Context and device";
  app.add_option("--n-ctx", rt.n_ctx, "KV cells of all sessions together (per-seq KV: n-ctx / --max-sessions each); 0: "
                 "each request's room the model's trained context, or the largest whose KV fits --kv-mb (said in the start line)")
      ->envname("UMA_N_CTX")->capture_default_str()->check(CLI::Range(0, 1 << 20))->group(group);
  app.add_option("--kv-mb", f.kv_mb, "the KV budget (MiB) --n-ctx 0 sizes the context by, and that an explicit --n-ctx must "
                 "fit; -1: half of available host memory on a CPU, 85% of free GPU memory less 512 MiB on a GPU")
      ->envname("UMA_KV_MB")->capture_default_str()->check(CLI::Range(static_cast<std::int64_t>(-1), static_cast<std::int64_t>(1) << 30))->group(group);
  app.add_option("--kv-layout", f.kv_layout, "KV cache: unified (one pool; a request may use all of n-ctx), per-seq "
                 "(n-ctx / sessions each; attention spans a sequence's own cells) or auto (per-seq with more than one session)")
      ->envname("UMA_KV_LAYOUT")->capture_default_str()->check(CLI::IsMember(enum_words(kKvLayoutNames)))->group(group);
  app.add_option("--n-batch", rt.n_batch, "most tokens in one decode: a burst of prompts while nobody decodes, and "
                 "on a GPU a tick beside decoding streams (0: 2048)")->envname("UMA_N_BATCH")
      ->capture_default_str()->check(CLI::Range(0, 1 << 16))->group(group);
  app.add_option("--n-ubatch", rt.n_ubatch, "most tokens in one pass of llama.cpp (caps a tick with streams decoding "
                 "on the CPU)")
      ->envname("UMA_N_UBATCH")->capture_default_str()->check(CLI::Range(1, 1 << 16))->group(group);
  app.add_option("-t,--threads", f.threads, "compute threads: auto (as many as the cores this process may use that "
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
      })->group(group);
  app.add_option("--gpu-layers", rt.n_gpu_layers, "layers (weights and KV) on the GPU: -1 all when llama.cpp has a GPU "
                 "backend (UMA_GPU=cuda scripts/setup.sh), 0 none")
      ->envname("UMA_GPU_LAYERS")->capture_default_str()->check(CLI::Range(-1, 100000))->group(group);
  app.add_option("--flash-attn", f.flash_attn, "flash attention: on, off or auto (llama.cpp decides; off on CPU-only builds with a unified KV)")
      ->envname("UMA_FLASH_ATTN")->capture_default_str()->check(CLI::IsMember(enum_words(kFlashAttentionNames)))->group(group);
  app.add_option("--backend-sampling", f.backend_sampling, "greedy requests sampled on the device, in the decode's "
                 "graph (only token ids reach the host): on, off or auto (on where the output layer is on a GPU)")
      ->envname("UMA_BACKEND_SAMPLING")->capture_default_str()->check(CLI::IsMember(enum_words(kDeviceSamplingNames)))->group(group);
  app.add_flag("--mmap,!--no-mmap", f.mmap, "memory-map the model file (default on)")->envname("UMA_MMAP")->group(group);
  app.add_flag("--mlock,!--no-mlock", f.mlock, "lock the model in RAM (default off)")->envname("UMA_MLOCK")->group(group);
  app.add_flag("--host-copy,!--no-host-copy", rt.host_copy, "a model file in host memory (tmpfs, a memfd: the agent's "
               "DRAM tier) reaches the GPU by a pinned copy, not llama.cpp's upload of its mapping (default on)")
      ->envname("UMA_HOST_COPY")->group(group);
  app.add_option("--deep-pass-row-cells", rt.deep_pass_row_cells, "per-seq KV: a sequence deeper than the others by "
                 "this many cells times their number decodes in a pass of its own; -1: 2048 on a CPU, never on a GPU; 0: never")
      ->capture_default_str()->check(CLI::Range(static_cast<std::int64_t>(-1), static_cast<std::int64_t>(1) << 40))->envname("UMA_DEEP_PASS_ROW_CELLS")->group(group);
  app.add_option("--pad-entries-per-pass", rt.pad_entries_per_pass, "per-seq KV: the most padding entries a decode "
                 "spends to save one pass, where prompt chunks of consecutive sequence ids are padded to one length; "
                 "-1: 64 on a GPU, never on a CPU; 0: never")
      ->capture_default_str()->check(CLI::Range(-1, 1 << 20))->envname("UMA_PAD_ENTRIES_PER_PASS")->group(group);
  app.add_option("--graphs-kept", rt.graphs_kept, "built graphs kept beside the last one (each with compute buffers of "
                 "its own, reserved as the context's), so that decode and prompt passes replay theirs (per-seq KV)")
      ->capture_default_str()->check(CLI::Range(0, 64))->envname("UMA_GRAPHS_KEPT")->group(group);
  // Tests only: the model load takes this much longer, so "loading" states can be observed.
  app.add_option("--test-load-delay-ms", c.test_load_delay_ms)->group("")->check(CLI::Range(0, 60000));
}

void add_session_flags(CLI::App& app, DaemonFlags& f) {
  DaemonConfig& c = f.config;
  ServerConfig& srv = f.config.server;
  SchedulerConfig& sc = f.config.scheduler;
  const char* group = "Sessions and requests";
  app.add_option("-s,--socket", srv.socket_path, "Unix socket path (created with mode 0600)")->envname("UMA_SOCK")
      ->capture_default_str()->group(group);
  app.add_option("--protocol", f.protocol, "wire protocol: json (length-prefixed frames) or newline")
      ->envname("UMA_PROTOCOL")->capture_default_str()->check(CLI::IsMember(enum_words(kProtocolNames)))->group(group);
  app.add_option("--max-sessions", srv.max_sessions, "concurrent sessions (= KV sequences)")->envname("UMA_MAX_SESSIONS")
      ->capture_default_str()->check(CLI::Range(1, 256))->group(group);
  app.add_option("--max-connections", srv.max_connections, "open connections per front end (the Unix socket; HTTP too), sessions or not; more are closed at once")
      ->envname("UMA_MAX_CONNECTIONS")->capture_default_str()->check(CLI::Range(1, 65536))->group(group);
  app.add_option("--max-prompt-bytes", f.max_prompt_bytes, "largest prompt in bytes (default: "
                 "from the context, n_ctx per request x 8, at least 64 KiB)")->envname("UMA_MAX_PROMPT_BYTES")
      ->capture_default_str()->check(CLI::Range(1, 64 << 20))->group(group);
  app.add_option("--max-frame-bytes", f.max_frame_bytes, "largest JSON frame accepted (checked from "
                 "its header; default: from the prompt limit)")
      ->envname("UMA_MAX_FRAME_BYTES")->capture_default_str()->check(CLI::Range(64, 256 << 20))->group(group);
  app.add_option("--max-tx-kib", f.max_tx_kib, "unsent reply bytes per session before a slow reader is dropped (KiB; one whole reply onto nothing unsent is taken whatever its size)")
      ->envname("UMA_MAX_TX_KIB")->capture_default_str()->check(CLI::Range(4, 1 << 20))->group(group);
  app.add_option("--idle-timeout-sec", srv.idle_timeout_sec, "close idle connections after this long (0: never)")
      ->envname("UMA_IDLE_TIMEOUT_SEC")->capture_default_str()->check(CLI::Range(0, 1 << 24))->group(group);
  app.add_option("--max-tokens", sc.max_tokens_cap,
                 "the most tokens one reply generates; a request asking for more gets this many (0: no cap "
                 "but the context)")
      ->envname("UMA_MAX_TOKENS")->capture_default_str()->check(CLI::Range(0, 1 << 30))->group(group);
  app.add_option("--default-max-tokens", sc.default_max_tokens,
                 "tokens generated when a request names no max_tokens (0: until end of generation, a stop "
                 "string or the context's end)")
      ->envname("UMA_DEFAULT_MAX_TOKENS")->capture_default_str()->check(CLI::Range(0, 1 << 30))->group(group);
  app.add_option("--temperature", srv.limits.sampling.temperature, "default sampling temperature (0: greedy)")
      ->envname("UMA_TEMPERATURE")->capture_default_str()->check(CLI::Range(0.0, 100.0))->group(group);
  app.add_option("--seed", srv.limits.sampling.seed, "default sampling seed (with --temperature > 0)")
      ->envname("UMA_SEED")->group(group);
  app.add_option("--drain-sec", c.drain_sec, "SIGTERM drains: no new requests (with --agent the gateways move the "
                 "streams here to other agents serving the model), those in flight end, for up to this long, then the "
                 "daemon stops; 0: SIGTERM ends open streams with an error at once (SIGINT always does)")
      ->envname("UMA_DRAIN_SEC")->capture_default_str()->check(CLI::Range(0, 86400))->group(group);
}

void add_scheduling_flags(CLI::App& app, DaemonFlags& f) {
  DaemonConfig& c = f.config;
  SchedulerConfig& sc = f.config.scheduler;
  const char* group = "Scheduling";
  app.add_option("--slo-ttft-ms", sc.slo_ttft_ms, "time-to-first-token target (ms)")->envname("UMA_SLO_TTFT_MS")
      ->capture_default_str()->check(CLI::Range(1.0, 1e7))->group(group);
  app.add_option("--slo-tbt-ms", sc.slo_tbt_ms, "inter-token target (ms); the latency guard's deadline")
      ->envname("UMA_SLO_TBT_MS")->capture_default_str()->check(CLI::Range(1.0, 1e7))->group(group);
  app.add_option("--max-queue", sc.max_queue, "requests waiting at most, for a session (more: E_LIMIT_SESSIONS, 429; none in an agent) and for KV room (more: E_OVERLOADED)")
      ->envname("UMA_MAX_QUEUE")->capture_default_str()->check(CLI::Range(0, 1 << 20))->group(group);
  app.add_option("--max-queue-ms", sc.max_queue_ms, "a request waiting longer for a session or for KV room is refused")
      ->envname("UMA_MAX_QUEUE_MS")->capture_default_str()->check(CLI::Range(1.0, 1e9))->group(group);
  app.add_option("--background-max-wait-ms", sc.background_max_wait_ms,
                 "background requests: default TTFT target, and most time paused in all; past either they "
                 "rank as interactive")
      ->envname("UMA_BACKGROUND_MAX_WAIT_MS")->capture_default_str()->check(CLI::Range(1.0, 1e9))->group(group);
  app.add_option("--tenant-max-requests", sc.tenant_max_requests,
                 "requests in flight per metadata.tenant (0: no cap); more get E_OVERLOADED")
      ->envname("UMA_TENANT_MAX_REQUESTS")->capture_default_str()->check(CLI::Range(0, 1 << 20))->group(group);
  app.add_option("--kv-watermark", sc.kv_watermark,
                 "share of the KV cells kept free when starting or resuming a request, for running ones to grow "
                 "into before anyone is paused")
      ->envname("UMA_KV_WATERMARK")->capture_default_str()->check(CLI::Range(0.0, 0.5))->group(group);
  app.add_option("--preempt", f.preempt, "pausing background sessions for interactive ones: auto (save KV to host "
                 "memory or recompute, whichever is cheaper), save, recompute, off")
      ->envname("UMA_PREEMPT")->capture_default_str()->check(CLI::IsMember(enum_words(kPreemptNames)))->group(group);
  app.add_option("--preempt-host-mb", f.preempt_host_mb, "host memory for the saved KV of paused sessions (MiB)")
      ->envname("UMA_PREEMPT_HOST_MB")->capture_default_str()->check(CLI::Range(0, 1 << 24))->group(group);
  app.add_option("--prefill-policy", f.prefill_policy, "how many prompt tokens a tick carries: slo (the worst of the "
                 "streams' gap and the waiting prompts' TTFT, each over its target, minimised with the tick cost "
                 "model; when every target can be met, the fullest tick that meets them), slo-balance (the worst "
                 "ratio minimised even then) or gap (the streams' gap alone, with the overdue guard)")
      ->envname("UMA_PREFILL_POLICY")->capture_default_str()->check(CLI::IsMember(enum_words(kPrefillPolicyNames)))->group(group);
  app.add_option("--min-prefill", sc.min_prefill,
                 "prompt tokens every tick may prefill next to running streams, at least (smaller: steadier "
                 "streams, slower long prompts; raised where a prefill tick has a measured fixed cost). "
                 "Default 8 with a unified KV, n-ubatch with per-sequence KV (the GPU default)")
      ->envname("UMA_MIN_PREFILL")->capture_default_str()->check(CLI::Range(1, 1 << 16))->group(group);
  app.add_option("--prompt-chunks-max", sc.prompt_chunks_max, "a prompt is prefilled in at most this many chunks "
                 "(0: no bound)")->envname("UMA_PROMPT_CHUNKS_MAX")->capture_default_str()->check(CLI::Range(0, 1 << 16))->group(group);
  app.add_option("--ttft-solo-factor", sc.ttft_solo_factor, "a prompt's TTFT target: --slo-ttft-ms plus this many "
                 "times the predicted prefill of its prompt and of those that arrived before it")->envname("UMA_TTFT_SOLO_FACTOR")->capture_default_str()
      ->check(CLI::Range(0.0, 100.0))->group(group);
  app.add_option("--gather-ms", sc.gather_max_ms, "before a tick that would only prefill, wait at most this long "
                 "(and 1% of that tick's predicted time) for the rest of a burst of arrivals (0: never)")
      ->capture_default_str()->check(CLI::Range(0.0, 1000.0))->envname("UMA_GATHER_MS")->group(group);
  app.add_option("--tick-ms", sc.tick_target_ms, "decode time per tick the budget adapts toward (ms)")
      ->envname("UMA_TICK_MS")->capture_default_str()->check(CLI::Range(1.0, 10000.0))->group(group);
  app.add_flag("--pipelined-ticks,!--no-pipelined-ticks", sc.pipelined_ticks, "on a GPU, launch the next decode "
               "before the last one's tokens become text and events (default on)")->envname("UMA_PIPELINED_TICKS")->group(group);
  app.add_option("--calibrate-ms,--agent-calibrate-ms", c.agent_calibrate_ms, "time prompt chunks and decode steps "
                 "for up to this long at start, while idle (the first request ends it): the tick cost model's first "
                 "samples; an agent calibrates before its first heartbeat, whose prefill rate gateways route by; 0: none")
      ->envname("UMA_CALIBRATE_MS")->capture_default_str()->check(CLI::Range(0, 60000))->group(group);
}

void add_speculation_flags(CLI::App& app, DaemonFlags& f) {
  DaemonConfig& c = f.config;
  SchedulerConfig& sc = f.config.scheduler;
  const char* group = "Speculation";
  app.add_option("--speculative", f.speculative, "speculative decoding for requests that do not say: lookup (drafts "
                 "from the prompt and output so far, else from --draft-model when given, verified in the batch when "
                 "the tick cost model says it pays) or off")->envname("UMA_SPECULATIVE")->capture_default_str()->check(CLI::IsMember({"lookup", "off"}))->group(group);
  app.add_option("--draft-max", sc.draft_max, "draft tokens one request verifies in a tick, at most (0: no "
                 "speculation)")->envname("UMA_DRAFT_MAX")->capture_default_str()->check(CLI::Range(0, 64))->group(group);
  app.add_option("--draft-model", c.draft_model, "a small model with the served model's vocabulary that drafts "
                 "tokens for speculative decoding where prompt lookup finds none")->envname("UMA_DRAFT_MODEL")
      ->check(CLI::ExistingFile)->group(group);
  // Tests only: every draft found is verified, whatever the cost model says.
  app.add_flag("--speculative-force", sc.speculate_always)->group("");
  // Benchmarks only: the stream count from which speculation's plans stop giving every stream equal drafts.
  app.add_option("--spec-uniform-below", sc.spec_uniform_streams_below)->envname("UMA_SPEC_UNIFORM_BELOW")
      ->check(CLI::Range(0, 1 << 16))->group("");
}

void add_prefix_cache_flags(CLI::App& app, DaemonFlags& f) {
  SchedulerConfig& sc = f.config.scheduler;
  const char* group = "Prefix cache";
  app.add_flag("--prefix-cache,!--no-prefix-cache", f.prefix_cache,
               "reuse the KV of earlier prompts' shared prefixes (default on)")->envname("UMA_PREFIX_CACHE")->group(group);
  app.add_option("--prefix-cache-seqs", sc.prefix.max_kept, "finished sequences kept in the KV cache for reuse")
      ->envname("UMA_PREFIX_CACHE_SEQS")->capture_default_str()->check(CLI::Range(0, 128))->group(group);
  app.add_option("--prefix-cache-idle-ms", sc.prefix.idle_ms, "unified KV: a kept sequence unused this long moves to "
                 "host memory (idle cells slow every decode there; per-sequence KV keeps them until room is needed)")
      ->envname("UMA_PREFIX_CACHE_IDLE_MS")->capture_default_str()->check(CLI::Range(0.0, 1e9))->group(group);
  app.add_option("--prefix-cache-mb", f.prefix_cache_mb, "host memory for prefix snapshots evicted from "
                 "the KV cache (MiB; default: an eighth of the machine's memory, at most 8192)")
      ->envname("UMA_PREFIX_CACHE_MB")->check(CLI::Range(0, 1 << 24))->group(group);
  // Tests only: a hash under which every block collides, to prove hits are confirmed by tokens.
  app.add_option("--prefix-hash", f.prefix_hash)->group("")->check(CLI::IsMember({"fnv", "weak"}));
}

void add_http_flags(CLI::App& app, DaemonFlags& f) {
  DaemonConfig& c = f.config;
  const char* group = "HTTP";
  app.add_option("--http", f.http_listen, "serve the OpenAI-compatible HTTP API on HOST:PORT (or PORT: loopback); "
                 "off unless given")->envname("UMA_HTTP")->group(group);
  app.add_option("--host", f.http_hosts, "llama-server's form of --http: serve HTTP on these addresses, comma-separated "
                 "(with several, an IPv6 one binds IPv6 only: 0.0.0.0,:: is both families; default 127.0.0.1)")
      ->envname("UMA_HTTP_HOST")->group(group);
  app.add_option("--port", f.http_port, "with --host (or alone): the HTTP port (default 8080; 0: any free one)")
      ->envname("UMA_HTTP_PORT")->check(CLI::Range(0, 65535))->group(group);
  app.add_option("--http-timeout-sec", c.http.timeout_sec, "a request must arrive whole within this; idle "
                 "keep-alive connections close after it")
      ->envname("UMA_HTTP_TIMEOUT_SEC")->capture_default_str()->check(CLI::Range(1, 3600))->group(group);
  app.add_option("--http-max-body-kib", f.http_max_body_kib, "largest HTTP request body (KiB; default: "
                 "from the prompt limit); more is 413")
      ->envname("UMA_HTTP_MAX_BODY_KIB")->capture_default_str()->check(CLI::Range(1, 1 << 20))->group(group);
  app.add_option("--api-key-file", f.api_key_file, "the HTTP API's key (first line of the file): every request but "
                 "GET /health needs 'Authorization: Bearer KEY' (or x-api-key: KEY)")->envname("UMA_API_KEY_FILE")->check(CLI::ExistingFile)->group(group);
  app.add_option("--api-key", f.api_key, "the HTTP API's key itself (as llama-server's and vLLM's --api-key; a file "
                 "keeps it out of the process list)")->envname("UMA_API_KEY")->group(group);
  app.add_option("--cors-origin", c.http.cors_origin, "browsers may call the HTTP API from this origin ('*': any, "
                 "the default as llama-server's; '': none): Access-Control-Allow-* headers, OPTIONS preflights answered "
                 "without the key")->envname("UMA_CORS_ORIGIN")->capture_default_str()->group(group);
  app.add_flag("--no-slots", f.no_slots, "GET /slots answers 501 (llama-server's --no-slots)")->envname("UMA_NO_SLOTS")->group(group);
  app.add_flag("--no-webui", f.no_webui, "no web page (a chat and a status view) at GET /")->envname("UMA_NO_WEBUI")->group(group);
  app.add_flag("--no-metrics", f.no_metrics, "GET /metrics over HTTP answers 501 (the socket's metrics stay)")
      ->envname("UMA_NO_METRICS")->group(group);
  app.add_flag("--strict-fields", c.http.limits.strict_fields, "a request field umad does not know is a 400 (by "
               "default it is ignored, named in X-Uma-Ignored-Fields and counted)")->envname("UMA_STRICT_FIELDS")->group(group);
}

void add_cluster_flags(CLI::App& app, DaemonFlags& f) {
  DaemonConfig& c = f.config;
  const char* group = cluster::kRedisFlagGroup;
  app.add_flag("--agent", c.agent, "cluster agent: heartbeat this daemon's state to Redis every second "
               "(needs --http)")->envname("UMA_AGENT")->group(group);
  cluster::add_redis_flags(app, c.redis);
  app.add_option("--agent-id", c.agent_id, "this agent's id in the cluster (default: the --http address)")
      ->envname("UMA_AGENT_ID")->group(group);
  app.add_option("--advertise", c.advertise, "the base URL gateways reach this agent at (default: "
                 "http://HOST:PORT of --http)")->envname("UMA_ADVERTISE")->group(group);
  app.add_option("--agent-events-port", c.agent_events_port, "the agent's KV-event stream (GET /kv-events) on "
                 "this port of the --http host; 0: any free one, advertised in its heartbeat")
      ->envname("UMA_AGENT_EVENTS_PORT")->capture_default_str()->group(group);
  app.add_option("--status-fd", c.status_fd, "run under a supervisor (uma-agent): JSON status lines on this "
                 "inherited descriptor; SIGUSR1 stops the daemon if no request is in flight")->group("")
      ->check(CLI::Range(3, 1 << 20));
}

}  // namespace

void add_daemon_flags(CLI::App& app, DaemonFlags& f) {
  add_model_flags(app, f);
  add_store_flags(app, f);
  add_context_flags(app, f);
  add_session_flags(app, f);
  add_scheduling_flags(app, f);
  add_speculation_flags(app, f);
  add_prefix_cache_flags(app, f);
  add_http_flags(app, f);
  add_cluster_flags(app, f);
  app.add_flag("--print-config", f.print_config, "print the configuration these flags and UMA_* variables give, as "
               "JSON, and exit (what the model decides, such as its trained context, is settled when it loads)");
}

void note_given_flags(const CLI::App& app, DaemonFlags& f) {
  const auto given = [&](const char* name) { return app.get_option(name)->count() > 0; };  // a flag or its twin
  f.min_prefill_given = given("--min-prefill");
  f.prefix_cache_mb_given = given("--prefix-cache-mb");
  f.prompt_limit_given = given("--max-prompt-bytes");
  f.frame_limit_given = given("--max-frame-bytes");
  f.body_limit_given = given("--http-max-body-kib");
}

}  // namespace uma
