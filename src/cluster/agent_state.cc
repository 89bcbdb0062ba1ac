#include "cluster/agent_state.h"

#include <nlohmann/json.hpp>

#include "common/json_text.h"

namespace uma::cluster {

namespace {

using json = nlohmann::json;

Status bad(const std::string& field) {
  return Status(ErrorCode::kBadRequest, "agent state: '" + field + "' is missing or of the wrong type", field);
}

Status read_string(const json& j, const char* key, std::string* out, bool required = true) {
  const auto it = j.find(key);
  if (it == j.end()) return required ? bad(key) : Status::Ok();
  if (!it->is_string()) return bad(key);
  *out = it->get<std::string>();
  return Status::Ok();
}

template <typename T>
Status read_number(const json& j, const char* key, T* out) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return Status::Ok();
  if (!it->is_number()) return bad(key);
  *out = it->get<T>();
  return Status::Ok();
}

}  // namespace

std::string encode_agent_state(const AgentState& s) {
  nlohmann::ordered_json j;
  j["id"] = s.id;
  j["address"] = s.address;
  j["boot_id"] = s.boot_id;
  j["events"] = s.events;
  j["ts_ms"] = s.ts_ms;
  j["models"] = nlohmann::ordered_json::array();
  for (const ModelState& m : s.models) {
    j["models"].push_back({{"name", m.name}, {"bytes", m.bytes}, {"state", m.state}, {"tier", m.tier}});
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
  AgentState s;
  Status st;
  if (!(st = read_string(j, "id", &s.id)).ok() || !(st = read_string(j, "address", &s.address)).ok() ||
      !(st = read_string(j, "boot_id", &s.boot_id)).ok() ||
      !(st = read_string(j, "events", &s.events, false)).ok() || !(st = read_number(j, "ts_ms", &s.ts_ms)).ok() ||
      !(st = read_number(j, "prefill_tok_s", &s.prefill_tok_s)).ok() ||
      !(st = read_number(j, "decode_tok_s", &s.decode_tok_s)).ok() ||
      !(st = read_number(j, "tick_fixed_ms", &s.tick_fixed_ms)).ok() ||
      !(st = read_number(j, "decode_tick_ms", &s.decode_tick_ms)).ok() ||
      !(st = read_number(j, "tick_tokens", &s.tick_tokens)).ok() ||
      !(st = read_number(j, "max_sessions", &s.max_sessions)).ok() ||
      !(st = read_number(j, "active_sessions", &s.active_sessions)).ok() ||
      !(st = read_number(j, "queued_sessions", &s.queued_sessions)).ok() ||
      !(st = read_number(j, "prefill_backlog_tokens", &s.prefill_backlog_tokens)).ok() ||
      !(st = read_number(j, "kv_cells_used", &s.kv_cells_used)).ok() ||
      !(st = read_number(j, "kv_cells_total", &s.kv_cells_total)).ok() ||
      !(st = read_number(j, "free_memory_bytes", &s.free_memory_bytes)).ok() ||
      !(st = read_number(j, "load_dram_bytes_s", &s.load_dram_bytes_s)).ok() ||
      !(st = read_number(j, "load_nvme_bytes_s", &s.load_nvme_bytes_s)).ok() ||
      !(st = read_number(j, "load_remote_bytes_s", &s.load_remote_bytes_s)).ok() ||
      !(st = read_number(j, "load_queue_bytes", &s.load_queue_bytes)).ok()) {
    return st;
  }
  const auto models = j.find("models");
  if (models == j.end() || !models->is_array()) return bad("models");
  for (const json& m : *models) {
    if (!m.is_object()) return bad("models");
    ModelState ms;
    if (!(st = read_string(m, "name", &ms.name)).ok() || !(st = read_number(m, "bytes", &ms.bytes)).ok() ||
        !(st = read_string(m, "state", &ms.state, false)).ok() || !(st = read_string(m, "tier", &ms.tier, false)).ok()) {
      return bad("models[]." + st.param());
    }
    s.models.push_back(std::move(ms));
  }
  *out = std::move(s);
  return Status::Ok();
}

}  // namespace uma::cluster
