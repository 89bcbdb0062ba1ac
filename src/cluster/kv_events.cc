#include "cluster/kv_events.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <limits>

#include "common/json_fields.h"
#include "common/json_text.h"

namespace uma::cluster {

namespace {

using json = nlohmann::json;

Status bad(const std::string& field) {
  return Status(ErrorCode::kBadRequest, "kv event: '" + field + "' is missing or of the wrong type", field);
}

json hex_array(const std::vector<std::uint64_t>& hashes) {
  json a = json::array();
  char buf[17];
  for (std::uint64_t h : hashes) {
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
    a.push_back(buf);
  }
  return a;
}

Status read_hex_array(const json& j, const char* key, std::vector<std::uint64_t>* out) {
  const auto it = j.find(key);
  if (it == j.end()) return Status::Ok();
  if (!it->is_array()) return bad(key);
  out->reserve(it->size());
  for (const json& v : *it) {
    if (!v.is_string()) return bad(key);
    const std::string& s = v.get_ref<const std::string&>();
    std::uint64_t h = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), h, 16);
    if (ec != std::errc() || end != s.data() + s.size() || s.empty()) return bad(key);
    out->push_back(h);
  }
  return Status::Ok();
}

}  // namespace

std::string encode_kv_event(const KvEvent& e) {
  nlohmann::ordered_json j;
  j["type"] = e.snapshot ? "snapshot" : "delta";
  if (e.snapshot) {
    j["boot_id"] = e.boot_id;
    j["block"] = e.block;
  }
  j["stored"] = hex_array(e.stored);
  if (!e.snapshot) j["evicted"] = hex_array(e.evicted);
  j["load"] = {{"active", e.load.active}, {"queued", e.load.queued}, {"backlog", e.load.backlog}, {"admitted", e.load.admitted}};
  if (e.draining) j["draining"] = true;
  return to_json_text(j);
}

Status decode_kv_event(std::string_view text, KvEvent* out) {
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Status(ErrorCode::kInvalidJson, "kv event is not a JSON object");
  KvEvent e;
  const JsonFields<json> f(j, "kv event");
  std::string type;
  if (Status st = f.string("type", &type); !st.ok()) return st;
  if (type == "snapshot") {
    e.snapshot = true;
  } else if (type != "delta") {
    return bad("type");
  }
  if (e.snapshot) {
    std::int64_t block = e.block;
    if (Status st = f.string("boot_id", &e.boot_id); !st.ok()) return st;
    if (Status st = f.integer("block", 1, 1 << 20, &block); !st.ok()) return st;
    e.block = static_cast<std::int32_t>(block);
  }
  Status st;
  if (!(st = read_hex_array(j, "stored", &e.stored)).ok() || !(st = read_hex_array(j, "evicted", &e.evicted)).ok()) return st;
  if (const auto load = j.find("load"); load != j.end()) {
    if (!load->is_object()) return bad("load");
    const JsonFields<json> l(*load, "kv event");
    constexpr std::int64_t kMin = std::numeric_limits<std::int64_t>::min(), kMax = std::numeric_limits<std::int64_t>::max();
    if (!(st = l.integer("active", kMin, kMax, &e.load.active)).ok() || !(st = l.integer("queued", kMin, kMax, &e.load.queued)).ok() ||
        !(st = l.integer("backlog", kMin, kMax, &e.load.backlog)).ok() || !(st = l.integer("admitted", kMin, kMax, &e.load.admitted)).ok()) {
      return st;
    }
  }
  if (const auto draining = j.find("draining"); draining != j.end()) {
    if (!draining->is_boolean()) return bad("draining");
    e.draining = draining->get<bool>();
  }
  *out = std::move(e);
  return Status::Ok();
}

void BlockJournal::blocks_changed(std::span<const std::uint64_t> stored, std::span<const std::uint64_t> evicted) {
  const std::lock_guard<std::mutex> lock(mu_);
  for (std::uint64_t h : stored) {
    held_.insert(h);
    dirty_.insert(h);
  }
  for (std::uint64_t h : evicted) {
    held_.erase(h);
    dirty_.insert(h);
  }
}

BlockJournal::Delta BlockJournal::take() {
  const std::lock_guard<std::mutex> lock(mu_);
  Delta d;
  for (std::uint64_t h : dirty_) {
    const bool now = held_.count(h) != 0;
    const bool was = published_.count(h) != 0;
    if (now && !was) {
      d.stored.push_back(h);
      published_.insert(h);
    } else if (!now && was) {
      d.evicted.push_back(h);
      published_.erase(h);
    }
  }
  dirty_.clear();
  return d;
}

std::vector<std::uint64_t> BlockJournal::published() const {
  const std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::uint64_t> out(published_.begin(), published_.end());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace uma::cluster
