// DaemonFlags: umad's flags as given. add_daemon_flags declares them in groups (model, model
// store, context and device, sessions, scheduling, speculation, prefix cache, HTTP, cluster), each
// with its UMA_* twin in the same declaration; derive_daemon_config (config.h) then checks what a
// parser cannot and derives the DaemonConfig, apart from parsing, so it is tested without a parse.
#pragma once

#include <cstdint>
#include <string>

#include "common/enum_names.h"
#include "daemon/config.h"

namespace CLI {
class App;
}

namespace uma {

// The words of umad's own modes (the runtime's are in runtime/context_size.h).
enum class PreemptMode : std::uint8_t { kAuto, kSave, kRecompute, kOff };
inline constexpr EnumName<PreemptMode> kPreemptNames[] = {
    {"auto", PreemptMode::kAuto}, {"save", PreemptMode::kSave}, {"recompute", PreemptMode::kRecompute}, {"off", PreemptMode::kOff}};
enum class PrefillPolicy : std::uint8_t { kSlo, kSloBalance, kGap };
inline constexpr EnumName<PrefillPolicy> kPrefillPolicyNames[] = {
    {"slo", PrefillPolicy::kSlo}, {"slo-balance", PrefillPolicy::kSloBalance}, {"gap", PrefillPolicy::kGap}};
inline constexpr EnumName<ProtocolKind> kProtocolNames[] = {{"json", ProtocolKind::kJson}, {"newline", ProtocolKind::kNewline}};

struct DaemonFlags {
  DaemonFlags();  // the values as given start at the config's defaults

  DaemonConfig config;  // what a flag sets as it is
  // What derive_daemon_config turns into config: modes as words, sizes in the flags' units.
  std::string threads = "auto", protocol = "json", preempt = "auto", prefill_policy = "slo", speculative = "lookup";
  std::string kv_layout = "auto", flash_attn = "auto", backend_sampling = "auto", reasoning = "auto";
  std::string prefix_hash = "fnv";
  std::string http_listen, http_hosts, api_key, api_key_file;
  int http_port = -1;
  int max_prompt_bytes, max_frame_bytes, max_tx_kib, http_max_body_kib, preempt_host_mb;
  int prefix_cache_mb = 0;
  std::int64_t kv_mb = -1;
  std::uint64_t store_nvme_mb = 0, store_dram_mb = 0;
  std::uint64_t image_cache_mb = 256;
  bool mmap = true, mlock = false, prefix_cache = true, no_slots = false, no_metrics = false, no_webui = false;
  bool print_config = false;
  std::string debug_env;  // UMA_DEBUG: 1 debug traces, 2 llama.cpp's too
  // Given on the command line or by the UMA_* twin (note_given_flags): kept, not derived.
  bool min_prefill_given = false, prefix_cache_mb_given = false;
  bool prompt_limit_given = false, frame_limit_given = false, body_limit_given = false;
};

// Declares every flag into app, bound to f.
void add_daemon_flags(CLI::App& app, DaemonFlags& f);
// After the parse: which of the flags whose defaults are derived were given.
void note_given_flags(const CLI::App& app, DaemonFlags& f);

}  // namespace uma
