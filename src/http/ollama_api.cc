#include "http/ollama_api.h"

#include <chrono>
#include <cstdio>
#include <ctime>
#include <map>

#include <nlohmann/json.hpp>

#include "common/json_text.h"
#include "http/infill.h"
#include "http/ollama_request.h"
#include "httpkit/http_wire.h"

namespace uma {

std::string ollama_time(std::chrono::system_clock::time_point t) {
  const std::time_t secs = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count() % 1000000;
  char buf[48];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%06lldZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<long long>(us));
  return buf;
}

namespace {

using json = nlohmann::ordered_json;

std::string rfc3339(std::chrono::system_clock::time_point t) { return ollama_time(t); }

std::int64_t ns(double ms) { return static_cast<std::int64_t>(ms * 1e6); }

void line(std::string& out, const json& j) { out += http_chunk(to_json_text(j) + "\n"); }

class OllamaWriter final : public ReplyWriter {
 public:
  OllamaWriter(const openai::CompletionRequest& r, bool chat) : r_(r), chat_(chat) {}

  std::string_view stream_content_type() const override { return "application/x-ndjson"; }
  void open(std::size_t, std::string&) override {}

  void delta(std::size_t index, const ChatDelta& d, std::span<const LogprobEntry>, std::size_t, std::string& out) override {
    if (index != 0) return;  // Ollama answers one choice
    if (d.tool_index >= 0) {
      Call& c = calls_[d.tool_index];
      c.name += d.tool_name;
      c.arguments += d.tool_arguments;
      return;
    }
    if (d.content.empty() && d.reasoning.empty()) return;
    json j = head();
    body(j, d.content, d.reasoning, {});
    j["done"] = false;
    line(out, j);
  }

  void finish(std::size_t index, const ChoiceEnd& end, std::span<const LogprobEntry>, std::size_t, std::string& out) override {
    if (index != 0) return;
    reason_ = end.reason == "length" ? "length" : "stop";
    if (calls_.empty() || !chat_) return;
    // Ollama sends a call whole, in one message.
    std::vector<ToolCall> calls;
    for (const auto& [i, c] : calls_) calls.push_back({"", c.name, c.arguments});
    json j = head();
    body(j, "", "", calls);
    j["done"] = false;
    line(out, j);
  }

  void close(const openai::Usage& u, std::string& out) override {
    json j = head();
    body(j, "", "", {});
    end(j, u);
    line(out, j);
  }

  void fail(const Status& st, std::string& out) override { line(out, {{"error", st.message()}}); }

  std::string whole(std::span<const WholeChoice> choices, const openai::Usage& u) override {
    json j = head();
    if (!choices.empty()) {
      const WholeChoice& c = choices.front();
      reason_ = c.end.reason == "length" ? "length" : "stop";
      body(j, c.text, c.reasoning, c.calls);
    }
    end(j, u);
    return to_json_text(j);
  }

  std::string error_body(const Status& st) const override { return ollama_error_body(st); }

 private:
  struct Call {
    std::string name, arguments;
  };
  json head() const { return {{"model", r_.model}, {"created_at", rfc3339(std::chrono::system_clock::now())}}; }
  // The text (a chat's message, or generate's response) with its thinking and tool calls.
  void body(json& j, std::string_view text, std::string_view thinking, std::span<const ToolCall> calls) const {
    if (!chat_) {
      j["response"] = text;
      if (!thinking.empty()) j["thinking"] = thinking;
      return;
    }
    json m = {{"role", "assistant"}, {"content", text}};
    if (!thinking.empty()) m["thinking"] = thinking;
    if (!calls.empty()) {
      json all = json::array();
      for (const ToolCall& c : calls) {
        json args = json::parse(c.arguments, nullptr, false);  // Ollama's arguments are an object
        all.push_back({{"function", {{"name", c.name}, {"arguments", args.is_discarded() ? json(c.arguments) : args}}}});
      }
      m["tool_calls"] = std::move(all);
    }
    j["message"] = std::move(m);
  }
  void end(json& j, const openai::Usage& u) const {
    j["done"] = true;
    j["done_reason"] = reason_;
    if (!chat_) j["context"] = json::array();  // umad keeps no conversation state between requests
    j["total_duration"] = ns(u.prompt_ms + u.predicted_ms);
    j["load_duration"] = 0;
    j["prompt_eval_count"] = u.prompt_tokens;
    j["prompt_eval_duration"] = ns(u.prompt_ms);
    j["eval_count"] = u.completion_tokens;
    j["eval_duration"] = ns(u.predicted_ms);
  }

  const openai::CompletionRequest& r_;
  bool chat_;
  std::string reason_ = "stop";
  std::map<std::ptrdiff_t, Call> calls_;
};

std::unique_ptr<ReplyWriter> generate_writer(const openai::CompletionRequest& r, std::string, std::int64_t) {
  return std::make_unique<OllamaWriter>(r, false);
}

}  // namespace

std::unique_ptr<ReplyWriter> ollama_chat_writer(const openai::CompletionRequest& r, std::string, std::int64_t) {
  return std::make_unique<OllamaWriter>(r, true);
}

std::string ollama_error_body(const Status& st) { return to_json_text(json{{"error", st.message()}}); }

std::string ollama_embeddings_response(const std::string& model, const std::vector<std::vector<float>>& vectors,
                                       std::int32_t prompt_tokens, bool legacy) {
  if (legacy) return to_json_text(json{{"embedding", vectors.empty() ? std::vector<float>{} : vectors.front()}});
  return to_json_text(json{{"model", model}, {"embeddings", vectors}, {"total_duration", 0}, {"load_duration", 0},
                           {"prompt_eval_count", prompt_tokens}});
}

}  // namespace uma

namespace uma::http_route {
namespace {

namespace http = boost::beast::http;

Reply ollama_error(unsigned status, const std::string& message, ErrorCode code = ErrorCode::kOk) {
  return Reply{status, "application/json", to_json_text(json{{"error", message}}), code};
}
Reply ollama_error(const Status& st) {
  return ollama_error(http_status(st.code()), st.message(), st.code());
}

// What Ollama's model listings say of the one model: what umad knows of it.
json details(const ModelFacts& f) {
  char size[32];
  const double p = static_cast<double>(f.n_params);
  if (p >= 1e9) {
    std::snprintf(size, sizeof size, "%.1fB", p / 1e9);
  } else {
    std::snprintf(size, sizeof size, "%.0fM", p / 1e6);
  }
  return {{"parent_model", ""}, {"format", "gguf"}, {"family", ""}, {"families", json::array()},
          {"parameter_size", size}, {"quantization_level", ""}};
}

json model_entry(const Context& ctx, bool loaded) {
  const ModelFacts& f = *ctx.facts;
  const auto at = std::chrono::system_clock::time_point(std::chrono::seconds(f.created));
  json m = {{"name", ctx.model_id}, {"model", ctx.model_id}, {"size", f.size_bytes}, {"digest", ""},
            {"details", details(f)}};
  if (loaded) {
    m["expires_at"] = rfc3339(at + std::chrono::hours(24 * 365 * 10));  // kept loaded while umad runs
    m["size_vram"] = 0;
    m["context_length"] = f.n_ctx_seq;
  } else {
    m["modified_at"] = rfc3339(at);
  }
  return m;
}

// Whether a client's name is this server's model: its id, or a file name's stem (as uma-gw finds
// an agent's model: `oracle` names `oracle.gguf`).
bool names_model(const std::string& name, std::string_view id) { return name == id || name + ".gguf" == id; }

Reply show(std::string_view body, const Context& ctx) {
  const json j = json::parse(body, nullptr, false);
  const json* model = j.is_object() && j.contains("model") ? &j["model"] : j.is_object() && j.contains("name") ? &j["name"] : nullptr;
  if (model == nullptr || !model->is_string()) return ollama_error(400, "'model' is required", ErrorCode::kBadRequest);
  if (!names_model(model->get<std::string>(), ctx.model_id)) return ollama_error(404, "model '" + model->get<std::string>() + "' not found", ErrorCode::kNotFound);
  const ModelFacts& f = *ctx.facts;
  json info = {{"general.parameter_count", f.n_params}, {"general.context_length", f.n_ctx_train},
               {"general.embedding_length", f.n_embd}, {"general.vocab_size", f.n_vocab}};
  json capabilities = {"completion", "tools", "embedding"};
  if (f.vision) capabilities.push_back("vision");
  return Reply{200, "application/json",
               to_json_text(json{{"license", ""}, {"modelfile", ""}, {"parameters", ""}, {"template", f.chat_template},
                                 {"details", details(f)}, {"model_info", info},
                                 {"capabilities", capabilities},
                                 {"modified_at", rfc3339(std::chrono::system_clock::time_point(std::chrono::seconds(f.created)))}})};
}

// A generate with `suffix` as a completion of the FIM prompt (http/infill.h): the body's prompt
// becomes its token ids, raw.
Status fill_in_the_middle(ollama::Generate* g, const Context& ctx) {
  if (ctx.tokenize == nullptr || !*ctx.tokenize || ctx.facts == nullptr) {
    return Status(ErrorCode::kNotFound, "suffix (fill in the middle) is served by umad itself, not through this server", "suffix");
  }
  std::string native;
  if (Status st = infill_body(to_json_text(json{{"input_prefix", g->prompt}, {"input_suffix", g->suffix}}), ctx, &native); !st.ok()) {
    return st;
  }
  json body = json::parse(g->body);
  body.erase("messages");
  body["prompt"] = json::parse(native)["prompt"];
  g->body = to_json_text(body);
  g->raw = true;
  return {};
}

// The completion or error; errors in Ollama's shape.
std::variant<Reply, Completion> in_ollama_shape(std::variant<Reply, Completion> result, WriterFactory writer, std::string chat_body) {
  if (auto* r = std::get_if<Reply>(&result)) {
    if (r->status >= 400) {
      const json e = json::parse(r->body, nullptr, false);
      const std::string message = e.is_object() && e.contains("error") && e["error"].is_object() && e["error"].contains("message") &&
                                          e["error"]["message"].is_string()
                                      ? e["error"]["message"].get<std::string>()
                                      : r->body;
      r->body = to_json_text(json{{"error", message}});
    }
    return result;
  }
  Completion& c = std::get<Completion>(result);
  if (!writer) return result;  // embeddings: answered by their shape (openai::EmbeddingShape)
  c.writer = std::move(writer);
  c.id_prefix = "ollama-";
  c.chat_body = std::move(chat_body);  // what a gateway runs on its agent
  return result;
}

}  // namespace

Reply ollama_pull_local(std::string_view body, const std::function<bool(const std::string& model)>& have) {
  const json j = json::parse(body, nullptr, false);
  if (!j.is_object()) return ollama_error(400, "the body must be a JSON object", ErrorCode::kInvalidJson);
  const json* model = j.contains("model") ? &j["model"] : j.contains("name") ? &j["name"] : nullptr;  // "name": the older field
  if (model == nullptr || !model->is_string()) return ollama_error(400, "'model' is required", ErrorCode::kBadRequest);
  const auto stream = j.find("stream");
  if (stream != j.end() && !stream->is_boolean() && !stream->is_null()) {
    return ollama_error(400, "'stream' must be a boolean", ErrorCode::kBadRequest);
  }
  if (!have(model->get<std::string>())) {
    return ollama_error(404, "pull model manifest: model '" + model->get<std::string>() +
                                 "' is not among this server's models (the model store, uma-store, holds models for uma-gw)",
                        ErrorCode::kNotFound);
  }
  if (stream != j.end() && stream->is_boolean() && !stream->get<bool>()) return Reply{200, "application/json", R"({"status":"success"})"};
  return Reply{200, "application/x-ndjson", "{\"status\":\"pulling manifest\"}\n{\"status\":\"success\"}\n"};
}

std::optional<Routed> ollama_route(http::verb method, std::string_view path, std::string_view body, const Context& ctx) {
  if (!path.starts_with("/api/")) return std::nullopt;
  const bool get = method == http::verb::get || method == http::verb::head;
  const bool post = method == http::verb::post;
  const bool own_model = ctx.facts != nullptr;  // a gateway has none of its own
  if (path == "/api/version" && get) return Routed{false, Reply{200, "application/json", to_json_text(json{{"version", std::string(kOllamaApiVersion)}})}};
  if ((path == "/api/tags" || path == "/api/ps") && get) {
    json models = json::array();
    if (own_model && ctx.ready) models.push_back(model_entry(ctx, path == "/api/ps"));
    return Routed{false, Reply{200, "application/json", to_json_text(json{{"models", models}})}};
  }
  if (path == "/api/show" && post && own_model) return Routed{false, show(body, ctx)};
  const bool serving = ctx.ready && !ctx.shutting_down;
  std::vector<std::string> ignored;
  if (path == "/api/chat" && post) {
    std::string chat;
    Status st = ollama::chat_body(body, &chat, &ignored);
    if (!st.ok()) return Routed{false, ollama_error(st)};
    auto result = in_ollama_shape(completion_request(true, chat, ctx), ollama_chat_writer, chat);
    if (auto* c = std::get_if<Completion>(&result)) c->api.ignored_fields.insert(c->api.ignored_fields.end(), ignored.begin(), ignored.end());
    return Routed{serving, std::move(result)};
  }
  if (path == "/api/generate" && post) {
    ollama::Generate g;
    Status st = ollama::generate_body(body, &g, &ignored);
    if (!st.ok()) return Routed{false, ollama_error(st)};
    if (g.load_only) {  // the model is loaded while umad runs: nothing to wait for
      return Routed{false, Reply{200, "application/json",
                                 to_json_text(json{{"model", g.model}, {"created_at", rfc3339(std::chrono::system_clock::now())},
                                                   {"response", ""}, {"done", true}, {"done_reason", "load"}})}};
    }
    if (!g.suffix.empty()) {  // fill in the middle: the prompt before the gap, as /infill builds it
      if (Status st = fill_in_the_middle(&g, ctx); !st.ok()) return Routed{false, ollama_error(st)};
    }
    auto result = in_ollama_shape(completion_request(!g.raw, g.body, ctx), generate_writer, g.body);
    if (auto* c = std::get_if<Completion>(&result)) c->api.ignored_fields.insert(c->api.ignored_fields.end(), ignored.begin(), ignored.end());
    return Routed{serving, std::move(result)};
  }
  if ((path == "/api/embed" || path == "/api/embeddings") && post) {
    if (ctx.tokenize == nullptr || !*ctx.tokenize) return Routed{false, ollama_error(404, "embeddings are served by umad itself, not through this server")};
    const bool legacy = path == "/api/embeddings";
    std::string openai_body;
    Status st = ollama::embed_body(body, legacy, &openai_body, &ignored);
    if (!st.ok()) return Routed{false, ollama_error(st)};
    auto result = in_ollama_shape(embeddings_request(openai_body, ctx), nullptr, "");
    if (auto* c = std::get_if<Completion>(&result)) {
      c->api.embedding_shape = legacy ? openai::EmbeddingShape::kOllamaLegacy : openai::EmbeddingShape::kOllama;
      c->api.ignored_fields.insert(c->api.ignored_fields.end(), ignored.begin(), ignored.end());
      c->id_prefix = "embd-";
    }
    return Routed{serving, std::move(result)};
  }
  if (path == "/api/pull" && post && own_model) {
    return Routed{false, ollama_pull_local(body, [&ctx](const std::string& m) { return names_model(m, ctx.model_id); })};
  }
  for (const char* p : {"/api/push", "/api/create", "/api/copy", "/api/delete", "/api/blobs"}) {
    if (path.starts_with(p)) {
      return Routed{false, ollama_error(501, std::string(p) + " is not supported here: umad serves the model it was started "
                                                               "with (the model store, uma-store, holds models)", ErrorCode::kNotSupported)};
    }
  }
  Reply r = ollama_error(404, "no such endpoint: " + std::string(path));
  return Routed{false, std::move(r)};
}

}  // namespace uma::http_route
