#include "daemon/config.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <vector>

#include <unistd.h>

#include "common/secret_file.h"
#include "daemon/daemon_flags.h"

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


Status bad(std::string why) { return Status(ErrorCode::kInvalidArgument, std::move(why)); }

// Modes into enums, sizes into bytes, the sessions' KV layout and sequence counts.
Status derive_runtime(DaemonFlags& f, std::vector<std::string>* notes) {
  DaemonConfig& c = f.config;
  RuntimeConfig& rt = c.runtime;
  SchedulerConfig& sc = c.scheduler;
  if (!parse_enum(kKvLayoutNames, f.kv_layout, &rt.kv_layout)) return bad("--kv-layout: want auto, unified or per-seq");
  if (!parse_enum(kFlashAttentionNames, f.flash_attn, &rt.flash_attn)) return bad("--flash-attn: want auto, on or off");
  if (!parse_enum(kDeviceSamplingNames, f.backend_sampling, &rt.backend_sampling)) return bad("--backend-sampling: want auto, on or off");
  rt.use_mmap = f.mmap;
  rt.use_mlock = f.mlock;
  if (f.kv_mb >= 0) rt.kv_budget_bytes = f.kv_mb << 20;
  c.threads_auto = f.threads == "auto";
  rt.n_threads = c.threads_auto ? 0 : std::atoi(f.threads.c_str());  // 0: every core the process may use
  // The layout is settled here, for the sequence count follows it. Per-sequence KV: a stream per
  // session and nothing more; a kept prefix stays in the stream it ran in (its session's, free
  // until a start needs it), so the prefix cache holds no memory the sessions do not. Unified: ids
  // cost nothing, kept prefixes take ids beyond the sessions' and cells of the one pool (llama.cpp
  // allows 256 ids in all).
  const std::int32_t sessions = c.server.max_sessions;
  const bool per_seq = kv_per_sequence(rt.kv_layout, sessions);
  rt.kv_layout = per_seq ? KvLayout::kPerSeq : KvLayout::kUnified;
  if (!sc.prefix.enabled) sc.prefix.max_kept = 0;
  sc.prefix.max_kept = std::min(sc.prefix.max_kept, 256 - sessions);
  rt.n_seq_max = per_seq ? sessions : sessions + sc.prefix.max_kept;
  rt.n_seq_sampling = sessions;
  // llama.cpp reserves an output row per sequence in a batch: fewer rows than sequences aborts
  // inside it at context creation. Adjusted and said, as a bad combination must never crash.
  for (auto [flag, n] : {std::pair{"n-batch", &rt.n_batch}, std::pair{"n-ubatch", &rt.n_ubatch}}) {
    if (*n > 0 && *n < rt.n_seq_max) {
      notes->push_back(std::string("--") + flag + " " + std::to_string(*n) + " is below the " +
                       std::to_string(rt.n_seq_max) + " sequences (--max-sessions " + std::to_string(sessions) +
                       (per_seq ? "" : " + " + std::to_string(sc.prefix.max_kept) + " kept prefixes") + "): " + flag +
                       " raised to " + std::to_string(rt.n_seq_max));
      *n = rt.n_seq_max;
    }
  }
  return Status::Ok();
}

// The scheduler's modes and the memory its prefixes and paused requests may take.
Status derive_scheduling(DaemonFlags& f) {
  DaemonConfig& c = f.config;
  RuntimeConfig& rt = c.runtime;
  SchedulerConfig& sc = c.scheduler;
  PreemptMode preempt = PreemptMode::kAuto;
  PrefillPolicy prefill = PrefillPolicy::kSlo;
  if (!parse_enum(kPreemptNames, f.preempt, &preempt)) return bad("--preempt: want auto, save, recompute or off");
  if (!parse_enum(kPrefillPolicyNames, f.prefill_policy, &prefill)) return bad("--prefill-policy: want slo, slo-balance or gap");
  c.min_prefill_given = f.min_prefill_given;
  if (f.min_prefill_given) {
    sc.per_seq_min_prefill = sc.min_prefill;  // asked for: both layouts
    sc.measured_prefill_floor = false;        // and not raised to the measured knee
  }
  sc.prefix.enabled = f.prefix_cache;
  sc.prefix.host_bytes = f.prefix_cache_mb_given ? static_cast<std::size_t>(f.prefix_cache_mb) << 20 : default_prefix_host_bytes();
  if (f.prefix_hash == "weak") sc.prefix.hash = [](std::uint64_t, std::span<const Token>) -> std::uint64_t { return 42; };
  sc.preemption = preempt != PreemptMode::kOff;
  sc.slo_prefill = prefill != PrefillPolicy::kGap;
  sc.slo_fill = prefill == PrefillPolicy::kSlo;
  sc.speculate = f.speculative == "lookup";
  const bool speculating = sc.speculate || !c.draft_model.empty();
  // A speculating request verifies its drafts on the device too (greedy): K + 1 rows per sequence.
  rt.outputs_per_seq = speculating ? sc.draft_max + 1 : 1;
  // And its verifying ticks' rows are reserved at start on a GPU (where growing the page-locked
  // output buffer mid-serving cost a tick 50 ms): 256 rows, 0.65 GB at a 128k vocabulary.
  rt.verify_outputs = speculating ? 256 : 0;
  sc.park = preempt == PreemptMode::kSave        ? ParkPreference::kSave
            : preempt == PreemptMode::kRecompute ? ParkPreference::kRecompute
                                                 : ParkPreference::kAuto;
  sc.park_host_bytes = static_cast<std::size_t>(f.preempt_host_mb) << 20;
  // Page-locked at start for what may be snapshotted: kept prefixes and paused requests' KV.
  const bool saves = sc.preemption && sc.park != ParkPreference::kRecompute;
  rt.kv_host_arena_bytes = std::min<std::uint64_t>(
      rt.kv_host_arena_bytes, (sc.prefix.enabled ? sc.prefix.host_bytes : 0) + (saves ? sc.park_host_bytes : 0));
  return Status::Ok();
}

// HOST:PORT or PORT (loopback).
Status parse_http_listen(const std::string& listen, HttpConfig* http) {
  const auto colon = listen.rfind(':');
  const std::string port = colon == std::string::npos ? listen : listen.substr(colon + 1);
  if (colon != std::string::npos && colon > 0) http->host = listen.substr(0, colon);
  char* end = nullptr;
  const long p = std::strtol(port.c_str(), &end, 10);
  if (port.empty() || *end != '\0' || p < 0 || p > 65535) return bad("--http wants HOST:PORT or PORT, got '" + listen + "'");
  http->port = static_cast<std::uint16_t>(p);
  return Status::Ok();
}

// The wire caps, the HTTP front end and its key.
Status derive_front_ends(DaemonFlags& f) {
  DaemonConfig& c = f.config;
  ServerConfig& srv = c.server;
  if (srv.socket_path.empty()) return bad("--socket must not be empty");
  if (!parse_enum(kProtocolNames, f.protocol, &srv.protocol)) return bad("--protocol: want json or newline");
  c.prompt_limit_given = f.prompt_limit_given;
  c.frame_limit_given = f.frame_limit_given;
  c.body_limit_given = f.body_limit_given;
  srv.limits.max_prompt_bytes = static_cast<std::size_t>(f.max_prompt_bytes);
  srv.limits.max_frame_bytes = static_cast<std::size_t>(f.max_frame_bytes);
  srv.max_tx_bytes = static_cast<std::size_t>(f.max_tx_kib) * 1024;
  if (!f.http_hosts.empty() || f.http_port >= 0) {
    if (!f.http_listen.empty()) return bad("--http, or --host and --port: not both");
    if (Status st = parse_http_hosts(f.http_hosts, f.http_port, &c.http); !st.ok()) return st;
    c.http_enabled = true;
  } else if (!f.http_listen.empty()) {
    if (Status st = parse_http_listen(f.http_listen, &c.http); !st.ok()) return st;
    c.http_enabled = true;
  }
  c.http.max_body_bytes = static_cast<std::size_t>(f.http_max_body_kib) * 1024;
  c.http.slots_endpoint = !f.no_slots;
  c.http.webui = !f.no_webui;
  c.http.metrics_endpoint = !f.no_metrics;
  if (!f.api_key.empty() && !f.api_key_file.empty()) return bad("--api-key and --api-key-file: give one");
  c.http.api_key = f.api_key;
  if (!f.api_key_file.empty()) {
    if (Status ks = read_secret_file(f.api_key_file, "API key", &c.http.api_key); !ks.ok()) {
      return bad("--api-key-file: " + ks.message());
    }
  }
  c.http.max_connections = srv.max_connections;
  c.http.max_tx_bytes = srv.max_tx_bytes;
  c.http.limits.max_prompt_bytes = srv.limits.max_prompt_bytes;
  if (c.mmproj.empty()) c.http.limits.images.max_images = 0;  // refused at the edge, before any decoding
  c.http.default_sampling = srv.limits.sampling;
  return Status::Ok();
}

// Which model or models, from where, and the cluster's needs.
Status derive_models(DaemonFlags& f) {
  DaemonConfig& c = f.config;
  RuntimeConfig& rt = c.runtime;
  if (c.models.size() == 1) rt.model_path = c.models.front();
  if (c.router() && (!c.http_enabled || c.agent)) {
    return bad("several models (--models-dir, or --model more than once) are served over --http, and not as a "
               "cluster agent (uma-agent is that)");
  }
  if (c.router() && !c.http.more_hosts.empty()) return bad("several models are served on one --host address");
  if (c.router() && !c.mmproj.empty()) return bad("--mmproj is one model's projector: give one --model with it");
  c.image_cache_bytes = f.image_cache_mb << 20;
  if (rt.model_path.empty() && c.model_id.empty() && !c.router()) return bad("--model FILE, --models-dir DIR or --model-id ID is required");
  c.store_nvme_bytes = f.store_nvme_mb << 20;
  c.store_dram_bytes = f.store_dram_mb << 20;
  if (!c.model_id.empty()) rt.model_path = c.model_id;  // its name from here on
  if (c.agent && !c.http_enabled) return bad("--agent needs --http (gateways reach agents over HTTP)");
  if (f.reasoning != "auto") c.reasoning = f.reasoning == "on";
  c.debug = !f.debug_env.empty() && f.debug_env != "0";
  c.trace = f.debug_env == "2";
  return Status::Ok();
}

}  // namespace

nlohmann::ordered_json daemon_config_json(const DaemonConfig& c) {
  const RuntimeConfig& rt = c.runtime;
  const ServerConfig& srv = c.server;
  const SchedulerConfig& sc = c.scheduler;
  using J = nlohmann::ordered_json;
  const auto mib = [](std::uint64_t bytes) { return bytes >> 20; };
  const auto or_derived = [](bool given, std::size_t v) { return given ? J(v) : J("from the context"); };
  const bool per_seq = rt.kv_layout == KvLayout::kPerSeq;
  J j;
  j["model"] = {{"path", rt.model_path}, {"models", c.models}, {"models_dir", c.models_dir}, {"model_id", c.model_id},
                {"mmproj", c.mmproj}, {"image_cache_mb", c.image_cache_bytes >> 20}, {"alias", c.alias}, {"chat_template", c.chat_template}, {"reasoning_format", c.reasoning_format},
                {"reasoning", c.reasoning ? J(*c.reasoning ? "on" : "off") : J("auto")}, {"max_models", c.max_models},
                {"models_mb", c.models_mb}, {"keep_alive", c.keep_alive}};
  j["store"] = {{"dir", c.store_dir}, {"nvme_mb", mib(c.store_nvme_bytes)}, {"dram_mb", mib(c.store_dram_bytes)}};
  j["context"] = {{"n_ctx", rt.n_ctx > 0 ? J(rt.n_ctx) : J("the model's trained context, or what fits")},
                  {"kv_mb", rt.kv_budget_bytes >= 0 ? J(mib(rt.kv_budget_bytes)) : J("from the device's free memory")},
                  {"kv_layout", enum_name(kKvLayoutNames, rt.kv_layout)}, {"sequences", rt.n_seq_max},
                  {"n_batch", rt.n_batch > 0 ? rt.n_batch : std::max(2048, rt.n_ubatch)}, {"n_ubatch", rt.n_ubatch},
                  {"threads", c.threads_auto ? J("auto") : J(rt.n_threads)}, {"gpu_layers", rt.n_gpu_layers},
                  {"flash_attn", enum_name(kFlashAttentionNames, rt.flash_attn)},
                  {"backend_sampling", enum_name(kDeviceSamplingNames, rt.backend_sampling)}, {"mmap", rt.use_mmap},
                  {"mlock", rt.use_mlock}, {"host_copy", rt.host_copy}, {"deep_pass_row_cells", rt.deep_pass_row_cells},
                  {"pad_entries_per_pass", rt.pad_entries_per_pass}, {"graphs_kept", rt.graphs_kept},
                  {"kv_host_arena_mb", mib(rt.kv_host_arena_bytes)}};
  j["sessions"] = {{"socket", srv.socket_path}, {"protocol", enum_name(kProtocolNames, srv.protocol)},
                   {"max_sessions", srv.max_sessions}, {"max_connections", srv.max_connections},
                   {"max_prompt_bytes", or_derived(c.prompt_limit_given, srv.limits.max_prompt_bytes)},
                   {"max_frame_bytes", or_derived(c.frame_limit_given, srv.limits.max_frame_bytes)},
                   {"max_tx_kib", srv.max_tx_bytes / 1024}, {"idle_timeout_sec", srv.idle_timeout_sec},
                   {"max_tokens", sc.max_tokens_cap}, {"default_max_tokens", sc.default_max_tokens},
                   {"temperature", srv.limits.sampling.temperature}, {"seed", srv.limits.sampling.seed},
                   {"drain_sec", c.drain_sec}};
  const PrefillPolicy prefill = !sc.slo_prefill ? PrefillPolicy::kGap : sc.slo_fill ? PrefillPolicy::kSlo : PrefillPolicy::kSloBalance;
  const PreemptMode preempt = !sc.preemption                           ? PreemptMode::kOff
                              : sc.park == ParkPreference::kSave      ? PreemptMode::kSave
                              : sc.park == ParkPreference::kRecompute ? PreemptMode::kRecompute
                                                                      : PreemptMode::kAuto;
  j["scheduling"] = {{"slo_ttft_ms", sc.slo_ttft_ms}, {"slo_tbt_ms", sc.slo_tbt_ms}, {"max_queue", sc.max_queue},
                     {"max_queue_ms", sc.max_queue_ms}, {"background_max_wait_ms", sc.background_max_wait_ms},
                     {"tenant_max_requests", sc.tenant_max_requests}, {"kv_watermark", sc.kv_watermark},
                     {"preempt", enum_name(kPreemptNames, preempt)}, {"preempt_host_mb", mib(sc.park_host_bytes)},
                     {"prefill_policy", enum_name(kPrefillPolicyNames, prefill)},
                     {"min_prefill", per_seq && !c.min_prefill_given ? J("n_ubatch, or the measured knee") : J(sc.min_prefill)},
                     {"prompt_chunks_max", sc.prompt_chunks_max}, {"ttft_solo_factor", sc.ttft_solo_factor},
                     {"gather_ms", sc.gather_max_ms}, {"tick_ms", sc.tick_target_ms}, {"pipelined_ticks", sc.pipelined_ticks},
                     {"calibrate_ms", c.agent_calibrate_ms}};
  j["speculation"] = {{"speculative", sc.speculate ? "lookup" : "off"}, {"draft_max", sc.draft_max}, {"draft_model", c.draft_model}};
  j["prefix_cache"] = {{"enabled", sc.prefix.enabled}, {"seqs", sc.prefix.max_kept}, {"idle_ms", sc.prefix.idle_ms},
                       {"host_mb", mib(sc.prefix.host_bytes)}};
  j["http"] = {{"enabled", c.http_enabled}, {"hosts", J::array()}, {"port", c.http.port},
               {"timeout_sec", c.http.timeout_sec}, {"max_body_bytes", or_derived(c.body_limit_given, c.http.max_body_bytes)},
               {"api_key", c.http.api_key.empty() ? "none" : "set"}, {"cors_origin", c.http.cors_origin},
               {"slots", c.http.slots_endpoint}, {"metrics", c.http.metrics_endpoint}, {"webui", c.http.webui},
               {"strict_fields", c.http.limits.strict_fields}};
  j["http"]["hosts"].push_back(c.http.host);
  for (const std::string& h : c.http.more_hosts) j["http"]["hosts"].push_back(h);
  j["cluster"] = {{"agent", c.agent}, {"redis", c.redis.address}, {"redis_user", c.redis.user},
                  {"redis_password_file", c.redis.password_file}, {"agent_id", c.agent_id}, {"advertise", c.advertise},
                  {"agent_events_port", c.agent_events_port}};
  return j;
}

Status derive_daemon_config(DaemonFlags& flags, DaemonConfig* out, std::vector<std::string>* notes) {
  for (Status (*step)(DaemonFlags&) : {derive_scheduling, derive_front_ends, derive_models}) {
    if (Status st = step(flags); !st.ok()) return st;
  }
  if (Status st = derive_runtime(flags, notes); !st.ok()) return st;
  *out = std::move(flags.config);
  return Status::Ok();
}

Status parse_daemon_config(int argc, char** argv, DaemonConfig& out, int* exit_code) {
  CLI::App app{"umad: keeps one GGUF model hot and serves many concurrent streams over a Unix socket"};
  app.set_version_flag("--version", "umad 0.1.0");
  app.get_formatter()->column_width(34);
  DaemonFlags flags;
  add_daemon_flags(app, flags);
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
  note_given_flags(app, flags);
  if (const char* debug = std::getenv("UMA_DEBUG")) flags.debug_env = debug;
  const bool print = flags.print_config;
  std::vector<std::string> notes;
  Status st = derive_daemon_config(flags, &out, &notes);
  for (const std::string& note : notes) std::cerr << "umad: " << note << "\n";
  if (!st.ok()) {
    std::cerr << "umad: " << st.message() << "\n";
    *exit_code = 2;
    return st;
  }
  if (print) {
    std::cout << daemon_config_json(out).dump(2) << "\n";
    *exit_code = 0;
    return Status::Ok();
  }
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
  // With a vision projector, a body carries images (base64): room for a few large ones.
  if (!cfg.body_limit_given && !cfg.mmproj.empty()) l.max_body_bytes = std::max(l.max_body_bytes, std::size_t{32} << 20);
  return l;
}

}  // namespace uma
