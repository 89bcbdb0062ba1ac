#include "chat/generic_calls.h"

#include <nlohmann/json.hpp>

#include <random>

namespace uma {
namespace {

using json = nlohmann::ordered_json;

json schema_of(const ChatTool& t) {
  json params = json::parse(t.parameters.empty() ? std::string("{}") : t.parameters, nullptr, false);
  if (!params.is_object()) params = json::object();
  if (!params.contains("type")) params["type"] = "object";
  return {{"type", "object"},
          {"properties", {{"name", {{"const", t.name}}}, {"arguments", params}}},
          {"required", {"name", "arguments"}},
          {"additionalProperties", false}};
}

class GenericCallParser final : public ChatOutputParser {
 public:
  std::vector<ChatDelta> feed(std::string_view text, bool final) override {
    text_.append(text);
    if (!final) return {};  // a call is read whole (the grammar guarantees its shape)
    const json j = json::parse(text_, nullptr, false);
    const bool call = j.is_object() && j.contains("name") && j["name"].is_string() && j.contains("arguments");
    if (!call) {
      content_ = text_;
      return {ChatDelta{text_, -1, {}, {}, {}, {}}};
    }
    std::mt19937_64 rng(std::random_device{}());
    static const char kAlnum[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    std::string id = "call_";
    for (int i = 0; i < 24; ++i) id += kAlnum[rng() % (sizeof kAlnum - 1)];
    const json& args = j["arguments"];
    calls_.push_back({id, j["name"].get<std::string>(), args.is_string() ? args.get<std::string>() : args.dump()});
    return {ChatDelta{{}, 0, calls_[0].id, calls_[0].name, calls_[0].arguments, {}}};
  }
  std::unique_ptr<ChatOutputParser> fresh() const override { return std::make_unique<GenericCallParser>(); }
  const std::string& content() const override { return content_; }
  const std::string& reasoning() const override { return reasoning_; }
  const std::vector<ToolCall>& tool_calls() const override { return calls_; }

 private:
  std::string text_, content_, reasoning_;
  std::vector<ToolCall> calls_;
};

}  // namespace

std::string generic_tools_prompt(const std::vector<ChatTool>& tools) {
  json list = json::array();
  for (const ChatTool& t : tools) {
    json params = json::parse(t.parameters.empty() ? std::string("{}") : t.parameters, nullptr, false);
    list.push_back({{"name", t.name}, {"description", t.description}, {"parameters", params.is_discarded() ? json::object() : params}});
  }
  return "You can call these tools:\n" + list.dump(2) +
         "\nTo call one, reply with only a JSON object: {\"name\": <the tool's name>, \"arguments\": <its arguments>}.";
}

std::string generic_call_schema(const std::vector<ChatTool>& tools, const std::string& forced) {
  json any = json::array();
  for (const ChatTool& t : tools) {
    if (forced.empty() || t.name == forced) any.push_back(schema_of(t));
  }
  return any.size() == 1 ? any[0].dump() : json{{"anyOf", any}}.dump();
}

std::unique_ptr<ChatOutputParser> generic_call_parser() { return std::make_unique<GenericCallParser>(); }

}  // namespace uma
