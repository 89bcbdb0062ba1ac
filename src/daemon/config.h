// DaemonConfig: what umad runs with, from its flags and UMA_* variables (daemon/daemon_flags.h
// declares them), parsed, checked and derived up front so a bad value is a clear error at start,
// never a crash later.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "cluster/redis_client.h"
#include "common/status.h"
#include "http/http_server.h"
#include "ipc/uds_server.h"
#include "runtime/llama_runtime.h"
#include "sched/scheduler.h"

namespace uma {

struct DaemonConfig {
  RuntimeConfig runtime;
  ServerConfig server;
  SchedulerConfig scheduler;
  bool http_enabled = false;  // --http given
  // --threads auto (the default): the compute threads follow the cores others leave this process
  // (sched/thread_governor.h); runtime.n_threads is then the most, set from what the process may use.
  bool threads_auto = true;
  bool min_prefill_given = false;  // --min-prefill (or its env twin) given: it holds for both KV layouts
  // --max-prompt-bytes, --max-frame-bytes, --http-max-body-kib given: kept; otherwise derived from
  // the context once the model is loaded (derive_request_limits).
  bool prompt_limit_given = false, frame_limit_given = false, body_limit_given = false;
  HttpConfig http;
  std::string chat_template;  // --chat-template: overrides the model's
  std::string draft_model;    // --draft-model: drafts for speculative decoding (runtime/draft_model.h)
  std::string mmproj;         // --mmproj: a vision projector; prompts may carry images (runtime/image_encoder.h)
  std::size_t image_cache_bytes = std::size_t{256} << 20;  // --image-cache-mb: recent images' embeddings kept
  std::string reasoning_format = "auto";  // --reasoning-format: a thinking model's reasoning apart (ChatTemplates)
  std::optional<bool> reasoning;          // --reasoning on|off (auto: unset): whether thinking templates think
  // --agent: heartbeat this daemon's state to Redis for the cluster's gateways (cluster/).
  bool agent = false;
  cluster::RedisFlags redis;             // --redis, --redis-password-file, --redis-user
  std::string agent_id;                  // --agent-id (default: the HTTP front end's host:port)
  std::uint16_t agent_events_port = 0;   // --agent-events-port (0: any free one)
  std::string advertise;                 // --advertise URL (default: http://host:port of --http)
  int agent_calibrate_ms = 2000;         // --agent-calibrate-ms: prefill timed before the first beat (0: none)
  // --model-id: the model comes from the catalog (Redis at --redis) through the model store
  // (store/tier_store.h: --store-dir as the NVMe tier, the catalog's URL as the remote tier).
  std::string model_id;
  std::string store_dir;              // --store-dir (empty: no NVMe tier)
  std::uint64_t store_nvme_bytes = 0;  // --store-nvme-mb (0: no limit)
  std::uint64_t store_dram_bytes = 0;  // --store-dram-mb: images kept in host memory when unused
  // --alias: the model's name in /v1/models and the beat (default: --model-id, else the file's name).
  std::string alias;
  // --status-fd N: umad runs under a supervisor (uma-agent, agent/model_process.h), which reads
  // JSON lines from descriptor N: {"event":"ready",...} once serving, then "busy"/"idle" as the
  // first request starts and the last ends; SIGUSR1 then asks it to stop if idle ("busy" if not).
  int status_fd = -1;
  // --drain-sec: SIGTERM stops taking requests and lets those in flight end (an agent's: move to
  // other agents) for up to this long before the shutdown; 0: SIGTERM ends them at once.
  int drain_sec = 0;
  // Several models behind one port (umad's model router, docs/AGENT.md): every *.gguf of
  // --models-dir and each of several --model, a umad of its own each, loaded on first request.
  std::vector<std::string> models;  // --model, as given (one: the plain single-model daemon)
  std::string models_dir;           // --models-dir
  int max_models = 3;               // --max-models: loaded at once
  std::uint64_t models_mb = 0;      // --models-mb: their bytes at most (0: no limit)
  std::string keep_alive = "5m";    // --keep-alive: an idle model's stay (Ollama's; -1: forever)
  bool router() const { return !models_dir.empty() || models.size() > 1; }
  bool debug = false;  // UMA_DEBUG=1
  bool trace = false;  // UMA_DEBUG=2: llama.cpp's debug log too
  int test_load_delay_ms = 0;  // tests only: a slow model load, to observe /health's 503
};

// Parses argv (and UMA_* variables). Returns kOk with the config; for --help, --version and
// --print-config sets *exit_code = 0 with the text already printed; for bad input returns an
// error, already printed, with *exit_code != 0.
Status parse_daemon_config(int argc, char** argv, DaemonConfig& out, int* exit_code);

struct DaemonFlags;
// Checks what the parser cannot and derives the config from the flags as given (consumed): modes
// into enums, sizes into bytes, the KV layout and sequence counts, the HTTP address, the API key
// from its file. Adjustments it made are said in *notes. An error names the flag.
Status derive_daemon_config(DaemonFlags& flags, DaemonConfig* out, std::vector<std::string>* notes);

// The configuration as --print-config shows it: every group, modes by their words, keys as "set".
nlohmann::ordered_json daemon_config_json(const DaemonConfig& cfg);

// The request caps the flags did not set, from the context one request may use: a prompt of
// n_ctx_seq tokens at 8 bytes a token (at least 64 KiB), and a body or frame twice that plus 64 KiB
// (JSON escaping; at least 1 MiB). Still caps: past them a request is a typed 413.
struct RequestLimits {
  std::size_t max_prompt_bytes, max_frame_bytes, max_body_bytes;
};
RequestLimits derive_request_limits(std::int32_t n_ctx_seq, const DaemonConfig& cfg);

}  // namespace uma
