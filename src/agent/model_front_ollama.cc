// ModelFront (model_front.h): Ollama's listings and its unload request, from the host's table.
#include <chrono>

#include "agent/model_front.h"
#include "common/json_text.h"
#include "http/ollama_api.h"

namespace uma::agent {

namespace {

using ojson = nlohmann::ordered_json;
using SystemClock = std::chrono::system_clock;

SystemClock::time_point wall(std::int64_t ms) { return SystemClock::time_point(std::chrono::milliseconds(ms)); }

}  // namespace

bool ModelFront::ollama_get(const HttpExchangePtr& ex) {
  const std::string& path = ex->request().path;
  if (path == "/api/version") {
    ex->reply_json(200, to_json_text(ojson{{"version", std::string(kOllamaApiVersion)}}));
    return true;
  }
  if (path != "/api/tags" && path != "/api/ps") return false;
  const bool loaded_only = path == "/api/ps";
  const std::vector<ModelInfo> resident = host_.models();
  ojson models = ojson::array();
  for (const FrontModel& f : models_) {
    const auto it = std::find_if(resident.begin(), resident.end(), [&](const ModelInfo& m) { return m.id == f.id; });
    const bool loaded = it != resident.end() && it->state == ModelState::kLoaded;
    if (loaded_only && !loaded) continue;
    ojson m = {{"name", f.id}, {"model", f.id}, {"size", f.bytes}, {"digest", ""}};
    if (loaded_only) {
      // Never, for a model kept while the router runs (keep_alive < 0): Ollama's far-off date.
      const std::int64_t ka = it->keep_alive_ms;
      m["expires_at"] = ollama_time(ka < 0 ? SystemClock::now() + std::chrono::hours(24 * 365 * 10)
                                           : wall(it->last_used_ms) + std::chrono::milliseconds(ka));
      m["size_vram"] = 0;
    } else {
      m["modified_at"] = ollama_time(loaded ? wall(it->loaded_at_ms) : SystemClock::now());
    }
    models.push_back(std::move(m));
  }
  ex->reply_json(200, to_json_text(ojson{{"models", models}}));
  return true;
}

bool ModelFront::ollama_unload(const HttpExchangePtr& ex, const std::string& model, const nlohmann::json& body,
                               std::optional<std::int64_t> keep_alive) {
  const std::string& path = ex->request().path;
  const bool generate = path == "/api/generate", chat = path == "/api/chat";
  if ((!generate && !chat) || keep_alive != std::optional<std::int64_t>(0)) return false;
  const auto empty = [&body](const char* field) {
    const auto it = body.find(field);
    return it == body.end() || it->is_null() || (it->is_string() && it->get<std::string>().empty()) ||
           (it->is_array() && it->empty());
  };
  if (!empty(generate ? "prompt" : "messages")) return false;  // work first; the keep_alive of 0 unloads it after
  // Unloaded once idle (or not loaded at all); Ollama answers at once either way.
  host_.unload(model, /*force=*/false, [](const Status&, const std::string&) {});
  ojson j = {{"model", model}, {"created_at", ollama_time(SystemClock::now())}};
  if (generate) j["response"] = "";
  else j["message"] = {{"role", "assistant"}, {"content", ""}};
  j["done"] = true;
  j["done_reason"] = "unload";
  ex->reply_json(200, to_json_text(j));
  return true;
}

}  // namespace uma::agent
