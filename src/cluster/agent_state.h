// AgentState: one agent's soft state as it travels through Redis (`uma:agent:{id}`, JSON), typed.
// The agent encodes it (publish/agent_heartbeat.h), gateways decode it (gateway/cluster_view.h):
// the format lives here once. Decoding type-checks every field (the text comes from Redis, which
// anyone on the network may write): a wrong type is an error, a missing optional number is 0.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "cluster/model_state.h"
#include "common/status.h"
#include "store/tier.h"

namespace uma::cluster {

// Redis: an agent's state lives at agent_key(id) (with a TTL: a key gone is an agent gone), its id
// in the set kAgentsSet.
inline std::string agent_key(const std::string& id) { return "uma:agent:" + id; }
inline constexpr const char* kAgentsSet = "uma:agents";

struct AgentModel {
  std::string name;
  std::int64_t bytes = 0;
  ModelState state = ModelState::kLoaded;  // a umad reports the model it serves (a loader's states: LoaderState)
  store::Tier tier = store::Tier::kDram;   // where its weights are: dram | nvme | remote | none
};

struct AgentState {
  std::string id;
  std::string address;  // base URL: http://host:port
  std::string boot_id;
  std::string events;      // host:port of its KV-event stream (publish/kv_event_server.h); empty: none
  std::int64_t ts_ms = 0;  // wall clock of the beat, ms since the epoch
  std::vector<AgentModel> models;
  double prefill_tok_s = 0.0;  // measured (EWMA over beats with such work); 0: not yet known
  double decode_tok_s = 0.0;
  // The agent's tick cost model (sched/tick_budget.h), for routing's prediction: a tick's fixed
  // cost, the decode-only tick with the streams decoding now (0 when none decode: not the average
  // tick, which a long prefill would swell), and the prompt tokens a tick carries.
  double tick_fixed_ms = 0.0;
  double decode_tick_ms = 0.0;
  std::int64_t tick_tokens = 0;
  std::int64_t max_sessions = 0;     // requests it takes at once (--max-sessions); 0: not said
  std::int64_t active_sessions = 0;
  std::int64_t queued_sessions = 0;
  std::int64_t prefill_backlog_tokens = 0;  // prompt tokens admitted and not yet prefilled
  std::int64_t kv_cells_used = 0;
  std::int64_t kv_cells_total = 0;
  std::int64_t free_memory_bytes = -1;
  // The model store's measured load rates per tier (bytes/s over its completed fills; 0: none
  // yet) and the bytes its loader still has to move: routing's L term (docs/STORE.md).
  double load_dram_bytes_s = 0.0;
  double load_nvme_bytes_s = 0.0;
  double load_remote_bytes_s = 0.0;
  std::int64_t load_queue_bytes = 0;

  const AgentModel* model(std::string_view name) const {
    for (const AgentModel& m : models) {
      if (m.name == name) return &m;
    }
    return nullptr;
  }
};

std::string encode_agent_state(const AgentState& s);
// kInvalidJson / kBadRequest naming the field on a malformed state.
Status decode_agent_state(std::string_view json_text, AgentState* out);

}  // namespace uma::cluster
