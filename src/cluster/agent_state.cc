#include "cluster/agent_state.h"

#include <nlohmann/json.hpp>

#include "common/json_fields.h"
#include "common/json_text.h"

namespace uma::cluster {

using json = nlohmann::json;

std::string encode_agent_state(const AgentState& s) {
  nlohmann::ordered_json j;
  j["id"] = s.id;
  j["address"] = s.address;
  j["boot_id"] = s.boot_id;
  j["events"] = s.events;
  j["ts_ms"] = s.ts_ms;
  j["models"] = nlohmann::ordered_json::array();
  for (const AgentModel& m : s.models) {
    j["models"].push_back({{"name", m.name}, {"bytes", m.bytes}, {"state", model_state_name(m.state)}, {"tier", store::tier_name(m.tier)}});
  }
  j["prefill_tok_s"] = s.prefill_tok_s;
  j["decode_tok_s"] = s.decode_tok_s;
  j["tick_fixed_ms"] = s.tick_fixed_ms;
  j["decode_tick_ms"] = s.decode_tick_ms;
  j["tick_tokens"] = s.tick_tokens;
  j["max_sessions"] = s.max_sessions;
  j["active_sessions"] = s.active_sessions;
  j["queued_sessions"] = s.queued_sessions;
  j["prefill_backlog_tokens"] = s.prefill_backlog_tokens;
  j["kv_cells_used"] = s.kv_cells_used;
  j["kv_cells_total"] = s.kv_cells_total;
  j["free_memory_bytes"] = s.free_memory_bytes;
  j["load_dram_bytes_s"] = s.load_dram_bytes_s;
  j["load_nvme_bytes_s"] = s.load_nvme_bytes_s;
  j["load_remote_bytes_s"] = s.load_remote_bytes_s;
  j["load_queue_bytes"] = s.load_queue_bytes;
  return to_json_text(j);
}

Status decode_agent_state(std::string_view text, AgentState* out) {
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Status(ErrorCode::kInvalidJson, "agent state is not a JSON object");
  const JsonFields<json> in(j, "agent state");
  AgentState s;
  Status st;
  if (!(st = in.string("id", &s.id)).ok() || !(st = in.string("address", &s.address)).ok() ||
      !(st = in.string("boot_id", &s.boot_id)).ok() ||
      !(st = in.string("events", &s.events, false)).ok() || !(st = in.number("ts_ms", &s.ts_ms)).ok() ||
      !(st = in.number("prefill_tok_s", &s.prefill_tok_s)).ok() ||
      !(st = in.number("decode_tok_s", &s.decode_tok_s)).ok() ||
      !(st = in.number("tick_fixed_ms", &s.tick_fixed_ms)).ok() ||
      !(st = in.number("decode_tick_ms", &s.decode_tick_ms)).ok() ||
      !(st = in.number("tick_tokens", &s.tick_tokens)).ok() ||
      !(st = in.number("max_sessions", &s.max_sessions)).ok() ||
      !(st = in.number("active_sessions", &s.active_sessions)).ok() ||
      !(st = in.number("queued_sessions", &s.queued_sessions)).ok() ||
      !(st = in.number("prefill_backlog_tokens", &s.prefill_backlog_tokens)).ok() ||
      !(st = in.number("kv_cells_used", &s.kv_cells_used)).ok() ||
      !(st = in.number("kv_cells_total", &s.kv_cells_total)).ok() ||
      !(st = in.number("free_memory_bytes", &s.free_memory_bytes)).ok() ||
      !(st = in.number("load_dram_bytes_s", &s.load_dram_bytes_s)).ok() ||
      !(st = in.number("load_nvme_bytes_s", &s.load_nvme_bytes_s)).ok() ||
      !(st = in.number("load_remote_bytes_s", &s.load_remote_bytes_s)).ok() ||
      !(st = in.number("load_queue_bytes", &s.load_queue_bytes)).ok()) {
    return st;
  }
  const auto models = j.find("models");
  if (models == j.end() || !models->is_array()) return in.bad("models");
  for (const json& m : *models) {
    if (!m.is_object()) return in.bad("models");
    const JsonFields<json> model(m, "agent state");
    AgentModel ms;
    std::string state = model_state_name(ms.state);
    std::string tier(store::tier_name(ms.tier));
    if (!(st = model.string("name", &ms.name)).ok() || !(st = model.number("bytes", &ms.bytes)).ok() ||
        !(st = model.string("state", &state, false)).ok() || !(st = model.string("tier", &tier, false)).ok()) {
      return in.bad("models[]." + st.param());
    }
    if (!parse_enum(kModelStateNames, state, &ms.state)) return in.bad("models[].state");
    if (!parse_enum(store::kTierNames, tier, &ms.tier)) return in.bad("models[].tier");
    s.models.push_back(std::move(ms));
  }
  *out = std::move(s);
  return Status::Ok();
}

}  // namespace uma::cluster
