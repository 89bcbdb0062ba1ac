#include "gateway/reencode.h"

#include <nlohmann/json.hpp>

namespace uma::gateway {
namespace {

using json = nlohmann::json;

std::string str(const json& o, const char* key) {
  const auto it = o.find(key);
  return it != o.end() && it->is_string() ? it->get<std::string>() : std::string();
}

openai::Usage usage_of(const json& u) {
  openai::Usage out;
  if (u.is_object()) {
    out.prompt_tokens = u.value("prompt_tokens", 0);
    out.completion_tokens = u.value("completion_tokens", 0);
  }
  return out;
}

}  // namespace

Reencoder::Reencoder(openai::CompletionRequest api, const http_route::WriterFactory& writer, std::string id,
                     std::int64_t created)
    : api_(std::move(api)), started_(std::chrono::steady_clock::now()) {
  writer_ = writer(api_, std::move(id), created);
}

double Reencoder::ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

std::string Reencoder::open(std::int64_t prompt_tokens) {
  std::string out;
  // What the gateway tokenized: the agent's count (same vocabulary and template); the cache's share
  // is told at the end.
  if (prompt_tokens > 0) writer_->prompt_known(static_cast<std::int32_t>(prompt_tokens), 0);
  writer_->open(1, out);
  return out;
}

std::string Reencoder::event(const SseEvent& ev) {
  std::string out;
  if (ev.done) {
    // The agent's stream carries no timings: the prompt's and the generation's as seen from here.
    const auto first = first_token_.value_or(std::chrono::steady_clock::now());
    usage_.prompt_ms = std::chrono::duration<double, std::milli>(first - started_).count();
    usage_.predicted_ms = ms_since(first);
    writer_->close(usage_, out);
    return out;
  }
  const std::size_t at = ev.forward.find("data: ");
  if (at == std::string::npos) return out;
  const json c = json::parse(ev.forward.substr(at + 6), nullptr, false);
  if (!c.is_object()) return out;
  if (ev.error || c.contains("error")) {
    const json& e = c["error"];
    writer_->fail(Status(ErrorCode::kInternal, e.is_object() ? str(e, "message") : std::string("error")), out);
    return out;
  }
  if (c.contains("usage") && c["usage"].is_object()) usage_ = usage_of(c["usage"]);
  const json& choices = c.value("choices", json::array());
  if (!choices.is_array() || choices.empty()) return out;
  const json& ch = choices[0];
  const json delta = ch.value("delta", json::object());
  // A chat chunk's delta, or a completions chunk's text (a request another API runs as completions).
  ChatDelta d{ch.contains("delta") ? str(delta, "content") : str(ch, "text"), -1, {}, {}, {}, str(delta, "reasoning_content")};
  if (!first_token_) first_token_ = std::chrono::steady_clock::now();
  if (!d.content.empty() || !d.reasoning.empty()) writer_->delta(0, d, {}, 0, out);
  if (delta.contains("tool_calls") && delta["tool_calls"].is_array()) {
    for (const json& call : delta["tool_calls"]) {
      const json fn = call.value("function", json::object());
      writer_->delta(0, ChatDelta{{}, call.value("index", 0), str(call, "id"), str(fn, "name"), str(fn, "arguments"), {}}, {}, 0, out);
    }
  }
  if (ch.contains("finish_reason") && ch["finish_reason"].is_string() && !finished_) {
    finished_ = true;
    const std::string reason = ch["finish_reason"].get<std::string>();
    const std::string word = str(ch, "stop_reason");  // the stop string that ended it (umad says, as vLLM does)
    writer_->finish(0, {reason, word}, {}, 0, out);
  }
  return out;
}

std::string Reencoder::fail(const Status& st) {
  std::string out;
  writer_->fail(st, out);
  return out + "0\r\n\r\n";
}

std::string Reencoder::whole(unsigned status, std::string_view agent_body) {
  const json j = json::parse(agent_body, nullptr, false);
  if (status != 200 || !j.is_object()) {
    const json e = j.is_object() ? j.value("error", json::object()) : json::object();
    const ErrorCode code = status == 404 ? ErrorCode::kNotFound : status == 429 ? ErrorCode::kOverloaded
                           : status == 413 ? ErrorCode::kPromptTooLarge : status == 503 ? ErrorCode::kUnavailable
                           : status >= 500 ? ErrorCode::kInternal : ErrorCode::kBadRequest;
    return writer_->error_body(Status(code, e.is_object() ? str(e, "message") : std::string(agent_body), e.is_object() ? str(e, "param") : ""));
  }
  const json& choices = j.value("choices", json::array());
  const json ch = choices.is_array() && !choices.empty() ? choices[0] : json::object();
  const json msg = ch.value("message", json::object());
  const std::string text = ch.contains("message") ? str(msg, "content") : str(ch, "text"), reasoning = str(msg, "reasoning_content"), reason = str(ch, "finish_reason"),
                    word = str(ch, "stop_reason");
  std::vector<ToolCall> calls;
  if (msg.contains("tool_calls") && msg["tool_calls"].is_array()) {
    for (const json& call : msg["tool_calls"]) {
      const json fn = call.value("function", json::object());
      calls.push_back({str(call, "id"), str(fn, "name"), str(fn, "arguments")});
    }
  }
  const WholeChoice one{text, reasoning, {reason, word}, {}, calls};
  openai::Usage usage = usage_of(j.value("usage", json::object()));
  usage.predicted_ms = ms_since(started_);  // a whole answer's time is known here only in total
  return writer_->whole(std::span<const WholeChoice>(&one, 1), usage);
}

}  // namespace uma::gateway
