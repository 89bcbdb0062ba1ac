#include "agent/agent_api.h"

#include <boost/beast/http/verb.hpp>
#include <nlohmann/json.hpp>

#include <cctype>
#include <cstdlib>
#include <map>

#include "common/json_text.h"
#include "metrics/prometheus.h"
#include "http/openai.h"

namespace uma::agent {

namespace http = boost::beast::http;
using ojson = nlohmann::ordered_json;

namespace {

Status bad(std::string message, std::string param = {}) {
  return Status(ErrorCode::kBadRequest, std::move(message), std::move(param));
}

// The body as an object with a valid "model" id.
Status read_body(const HttpRequest& r, nlohmann::json* body, std::string* model) {
  *body = nlohmann::json::parse(r.body, nullptr, false);
  if (body->is_discarded() || !body->is_object()) return Status(ErrorCode::kInvalidJson, "the body must be a JSON object");
  const auto it = body->find("model");
  if (it == body->end() || !it->is_string()) return bad("'model' (a string) is required", "model");
  *model = it->get<std::string>();
  if (!store::TierStore::valid_id(*model)) return bad("'model' is not a model id: [A-Za-z0-9._-], 1..128", "model");
  return {};
}

Status read_bool(const nlohmann::json& body, const char* name, bool* out) {
  const auto it = body.find(name);
  if (it == body.end() || it->is_null()) return {};
  if (!it->is_boolean()) return bad(std::string("'") + name + "' must be a boolean", name);
  *out = it->get<bool>();
  return {};
}

}  // namespace

Status read_keep_alive(const nlohmann::json& body, std::optional<std::int64_t>* out) {
  const auto it = body.find("keep_alive");
  if (it == body.end() || it->is_null()) return {};
  std::int64_t ms = 0;
  if (it->is_number()) {
    const double s = it->get<double>();
    if (!(s > -1e9 && s < 1e9)) return bad("'keep_alive' is out of range", "keep_alive");
    ms = s < 0 ? -1 : static_cast<std::int64_t>(s * 1000);
  } else if (it->is_string()) {
    if (Status st = parse_duration_ms(it->get<std::string>(), &ms); !st.ok()) return Status(st.code(), st.message(), "keep_alive");
  } else {
    return bad("'keep_alive' must be seconds or a duration (\"5m\")", "keep_alive");
  }
  *out = ms;
  return {};
}

namespace {

ojson update_json(const LoadUpdate& u) {
  ojson j = {{"model", u.id}};
  if (u.done && !u.status.ok()) {
    j["error"] = nlohmann::ordered_json::parse(http_error_body(u.status))["error"];
    return j;
  }
  j["state"] = u.done ? "loaded" : model_state_name(u.state);
  j["tier"] = u.tier;
  j["bytes"] = u.bytes;
  j["ready_bytes"] = u.ready_bytes;
  j["seconds"] = u.seconds;
  if (u.done) j["http"] = u.http;
  return j;
}

}  // namespace

Status parse_duration_ms(std::string_view text, std::int64_t* ms) {
  const Status invalid = bad("not a duration: '" + std::string(text.substr(0, 64)) + "' (e.g. 300ms, 45s, 5m, 1h30m, -1)");
  bool negative = false;
  if (!text.empty() && text.front() == '-') {
    negative = true;
    text.remove_prefix(1);
  }
  if (text.empty()) return invalid;
  double total = 0;
  bool any = false;
  while (!text.empty()) {
    std::size_t n = 0;
    while (n < text.size() && (std::isdigit(static_cast<unsigned char>(text[n])) || text[n] == '.')) ++n;
    if (n == 0 || n > 12) return invalid;
    const std::string number(text.substr(0, n));
    char* end = nullptr;
    const double value = std::strtod(number.c_str(), &end);
    if (end != number.c_str() + number.size()) return invalid;  // ".", "1.2.3"
    text.remove_prefix(n);
    std::size_t u = 0;
    while (u < text.size() && std::isalpha(static_cast<unsigned char>(text[u]))) ++u;
    const std::string_view unit = text.substr(0, u);
    text.remove_prefix(u);
    static const std::map<std::string_view, double> kUnits = {{"", 1000}, {"ms", 1}, {"s", 1000}, {"m", 60000}, {"h", 3600000}};
    const auto it = kUnits.find(unit);
    if (it == kUnits.end() || (unit.empty() && (any || !text.empty()))) return invalid;
    total += value * it->second;
    any = true;
  }
  if (total > 1e15) return invalid;
  *ms = negative ? (total > 0 ? -1 : 0) : static_cast<std::int64_t>(total);
  return {};
}

void AgentApi::handle(const HttpExchangePtr& ex) {
  const HttpRequest& r = ex->request();
  const bool get = r.method == http::verb::get, post = r.method == http::verb::post;
  if (get && r.path == "/health") {
    return ex->reply_json(200, "{\"status\":\"ok\",\"models_loaded\":" + std::to_string(host_.models().size()) + "}");
  }
  if (get && r.path == "/models") return models(ex);
  if (get && r.path == "/metrics") return metrics(ex);
  if (post && r.path == "/load") return load(ex);
  if (post && r.path == "/unload") return unload(ex);
  if (post && r.path == "/prefetch") return prefetch(ex);
  ex->reply_json(404, http_error_body(ErrorCode::kBadRequest, "no such endpoint: " + std::string(http::to_string(r.method)) + " " + r.path));
}

void AgentApi::load(const HttpExchangePtr& ex) {
  nlohmann::json body;
  std::string model;
  bool stream = true;
  std::optional<std::int64_t> keep_alive;
  Status st = read_body(ex->request(), &body, &model);
  if (st.ok()) st = read_bool(body, "stream", &stream);
  if (st.ok()) st = read_keep_alive(body, &keep_alive);
  if (!st.ok()) return ex->reply_error(st);
  if (stream) ex->start_events();
  host_.load(model, keep_alive, [ex, stream](const LoadUpdate& u) {
    if (ex->gone() || ex->answered()) return;  // the load goes on; nobody to tell
    if (!stream) {
      if (!u.done) return;
      if (!u.status.ok()) return ex->reply_error(u.status);
      return ex->reply_json(200, to_json_text(update_json(u)));
    }
    ex->event(to_json_text(update_json(u)));
    if (u.done) ex->end_events();
  });
}

void AgentApi::unload(const HttpExchangePtr& ex) {
  nlohmann::json body;
  std::string model;
  bool force = false;
  Status st = read_body(ex->request(), &body, &model);
  if (st.ok()) st = read_bool(body, "force", &force);
  if (!st.ok()) return ex->reply_error(st);
  host_.unload(model, force, [ex, model](const Status& s, const std::string& state) {
    if (ex->gone() || ex->answered()) return;
    if (!s.ok()) return ex->reply_error(s);
    ex->reply_json(state == "draining" ? 202 : 200, to_json_text(ojson{{"model", model}, {"state", state}}));
  });
}

void AgentApi::prefetch(const HttpExchangePtr& ex) {
  nlohmann::json body;
  std::string model;
  if (Status st = read_body(ex->request(), &body, &model); !st.ok()) return ex->reply_error(st);
  const auto t = body.find("tier");
  const std::string tier = t != body.end() && t->is_string() ? t->get<std::string>() : "";
  if (tier != "nvme" && tier != "dram") return ex->reply_error(bad("'tier' must be \"nvme\" or \"dram\"", "tier"));
  ModelOrigin origin;
  if (Status st = lookup_(model, &origin); !st.ok()) return ex->reply_error(st);
  if (Status st = store_.prefetch(origin.source, tier == "nvme" ? store::Tier::kNvme : store::Tier::kDram); !st.ok()) {
    return ex->reply_error(st);
  }
  ex->reply_json(202, to_json_text(ojson{{"model", model}, {"tier", tier}}));
}

void AgentApi::models(const HttpExchangePtr& ex) {
  struct Row {
    std::uint64_t bytes = 0;
    std::string tier = "remote";
    std::uint64_t ready_bytes = 0;
    bool filling = false;
    std::string error;
    const ModelInfo* resident = nullptr;
  };
  std::map<std::string, Row> rows;
  std::vector<CatalogEntry> catalog;
  if (list_) {
    if (Status st = list_(&catalog); !st.ok()) return ex->reply_error(st);
  }
  for (const CatalogEntry& c : catalog) {
    rows[c.id].bytes = c.bytes;
    rows[c.id].tier = std::string(store::tier_name(store_.tier(c.id)));  // a file on the NVMe tier counts
  }
  for (const store::ModelTierInfo& t : store_.list()) {
    Row& r = rows[t.id];
    r.bytes = t.bytes;
    r.tier = std::string(store::tier_name(t.tier));
    r.ready_bytes = t.ready_bytes;
    r.filling = t.filling;
    r.error = t.last_error;
  }
  const std::vector<ModelInfo> resident = host_.models();
  for (const ModelInfo& m : resident) {
    Row& r = rows[m.id];
    r.bytes = m.bytes;
    r.resident = &m;
  }
  ojson data = ojson::array();
  for (auto& [id, r] : rows) {
    if (r.tier == "none") r.tier = "remote";
    ojson j = {{"model", id}, {"state", r.resident ? model_state_name(r.resident->state) : r.tier}, {"tier", r.tier},
               {"bytes", r.bytes}, {"ready_bytes", r.resident ? r.resident->ready_bytes : r.ready_bytes},
               {"filling", r.filling}};
    if (!r.error.empty()) j["error"] = r.error;
    if (const ModelInfo* m = r.resident) {
      j["loaded_at"] = m->loaded_at_ms;
      j["last_used"] = m->last_used_ms;
      j["keep_alive"] = m->keep_alive_ms;
      j["in_use"] = m->in_use;
      j["http"] = m->http;
      j["pid"] = m->pid;
    }
    data.push_back(std::move(j));
  }
  ex->reply_json(200, to_json_text(ojson{{"models", data}, {"budget_bytes", host_.config().budget.bytes},
                                         {"held_bytes", host_.held_bytes()}}));
}

void AgentApi::metrics(const HttpExchangePtr& ex) {
  ex->reply(200, "text/plain; version=0.0.4", host_metrics_text(host_) + store_metrics_text(store_));
}

std::string host_metrics_text(const ModelHost& host) {
  const HostCounters& c = host.counters();
  std::string out;
  const auto counter = [&](const char* name, const char* help, std::uint64_t v, const char* labels = "") {
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " counter\n" + name + labels + " " +
           std::to_string(v) + "\n";
  };
  counter("uma_agent_loads_total", "model loads that ended serving", c.loads);
  counter("uma_agent_load_failures_total", "model loads that failed", c.load_failures);
  out += "# HELP uma_agent_unloads_total models unloaded, by reason\n# TYPE uma_agent_unloads_total counter\n";
  out += "uma_agent_unloads_total{reason=\"keep_alive\"} " + std::to_string(c.unloads_keep_alive) + "\n";
  out += "uma_agent_unloads_total{reason=\"room\"} " + std::to_string(c.unloads_room) + "\n";
  out += "uma_agent_unloads_total{reason=\"request\"} " + std::to_string(c.unloads_request) + "\n";
  counter("uma_agent_unload_refusals_total", "unloads a model refused: a request was in flight", c.unload_refusals);
  counter("uma_agent_model_crashes_total", "model processes that exited unasked", c.crashes);
  counter("uma_agent_standby_starts_total", "loads whose umad was the standby, started ahead", c.standby_starts);
  out += "# HELP uma_agent_models_held_bytes model bytes holding the budget\n# TYPE uma_agent_models_held_bytes gauge\n";
  out += "uma_agent_models_held_bytes " + std::to_string(host.held_bytes()) + "\n";
  prom::family(out, "uma_agent_standby_ready", "1 while a standby umad waits, its GPU contexts ready", prom::Type::kGauge);
  prom::sample(out, "uma_agent_standby_ready", "", std::uint64_t{host.standby_ready() ? 1u : 0u});
  prom::family(out, "uma_agent_standby_pinned_images", "DRAM-tier images the standby holds pinned for the load that takes it",
               prom::Type::kGauge);
  prom::sample(out, "uma_agent_standby_pinned_images", "", static_cast<std::uint64_t>(host.standby_pinned_images()));
  out += "# HELP uma_agent_models_budget_bytes the budget (0: none)\n# TYPE uma_agent_models_budget_bytes gauge\n";
  out += "uma_agent_models_budget_bytes " + std::to_string(host.config().budget.bytes) + "\n";
  prom::family(out, "uma_agent_model_state", "each model this agent holds, 1 in its state (queued, filling, starting, loaded, unloading)",
               prom::Type::kGauge);
  const std::vector<ModelInfo> models = host.models();
  for (const ModelInfo& m : models) {
    prom::sample(out, "uma_agent_model_state",
                 "model=\"" + prom::label_value(m.id) + "\",state=\"" + model_state_name(m.state) + "\"", std::uint64_t{1});
  }
  prom::family(out, "uma_agent_model_in_use", "1 while a request is in flight on the model", prom::Type::kGauge);
  for (const ModelInfo& m : models) {
    prom::sample(out, "uma_agent_model_in_use", "model=\"" + prom::label_value(m.id) + "\"", std::uint64_t{m.in_use ? 1u : 0u});
  }
  return out;
}

std::string store_metrics_text(const store::TierStore& store) {
  std::string out;
  prom::family(out, "uma_agent_model_tier", "each model in this agent's store, 1 at the fastest tier holding all of it (dram, nvme)",
               prom::Type::kGauge);
  for (const store::ModelTierInfo& t : store.list()) {
    if (t.tier == store::Tier::kNone) continue;
    prom::sample(out, "uma_agent_model_tier",
                 "model=\"" + prom::label_value(t.id) + "\",tier=\"" + std::string(store::tier_name(t.tier)) + "\"", std::uint64_t{1});
  }
  return out;
}

}  // namespace uma::agent
