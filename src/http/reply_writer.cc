#include "http/reply_writer.h"

#include <nlohmann/json.hpp>

#include "common/json_text.h"
#include "http/llama_server_api.h"
#include "httpkit/http_wire.h"

namespace uma {

void sse_event(std::string& out, std::string_view data, std::string_view name, std::string_view comment) {
  std::string event;
  if (!comment.empty()) {
    event.append(comment);
    event += "\n";
  }
  if (!name.empty()) {
    event += "event: ";
    event.append(name);
    event += "\n";
  }
  event += "data: ";
  event.append(data);
  event += "\n\n";
  out += http_chunk(event);
}

namespace {

class OpenAiWriter final : public ReplyWriter {
 public:
  OpenAiWriter(const openai::CompletionRequest& r, std::string id, std::int64_t created)
      : r_(r), id_(std::move(id)), created_(created) {}

  void open(std::size_t choices, std::string& out) override {
    // A chat stream opens each choice with the role alone, as OpenAI does; one a gateway resumes
    // here sent it where it began.
    if (!r_.chat || !r_.uma.resume.empty()) return;
    for (std::size_t i = 0; i < choices; ++i) sse_event(out, openai::chunk(r_, id_, created_, "", "", true, {}, 0, i));
  }

  void delta(std::size_t index, const ChatDelta& d, std::span<const LogprobEntry> logprobs, std::size_t text_offset,
             std::string& out) override {
    const bool plain = d.tool_index < 0 && d.reasoning.empty();
    sse_event(out,
              plain ? openai::chunk(r_, id_, created_, d.content, "", false, logprobs, text_offset, index)
                    : openai::delta_chunk(r_, id_, created_, d, false, logprobs, index),
              {}, tokens(logprobs));
  }

  void finish(std::size_t index, const ChoiceEnd& end, std::span<const LogprobEntry> logprobs, std::size_t text_offset,
              std::string& out) override {
    sse_event(out, openai::chunk(r_, id_, created_, "", end.reason, false, logprobs, text_offset, index, end.stop_word), {},
              tokens(logprobs));
  }

  void close(const openai::Usage& usage, std::string& out) override {
    if (r_.include_usage) sse_event(out, openai::usage_chunk(r_, id_, created_, usage));
    sse_event(out, "[DONE]");
  }

  void fail(const Status& st, std::string& out) override {
    sse_event(out, http_error_body(st));
    sse_event(out, "[DONE]");
  }

  std::string whole(std::span<const WholeChoice> choices, const openai::Usage& usage) override {
    std::vector<openai::Choice> all;
    for (const WholeChoice& c : choices) all.push_back({c.text, c.end.reason, c.logprobs, c.calls, c.reasoning, c.end.stop_word});
    std::string body = openai::response(r_, id_, created_, all, usage);
    if (!r_.verbose || choices.empty()) return body;
    // llama-server's verbose: its own final object for the first choice, beside OpenAI's fields.
    nlohmann::ordered_json j = nlohmann::ordered_json::parse(body, nullptr, false);
    if (!j.is_object()) return body;
    j["__verbose"] = nlohmann::ordered_json::parse(llama_server_final(r_, choices.front(), usage), nullptr, false);
    return to_json_text(j);
  }

  std::string error_body(const Status& st) const override { return http_error_body(st); }

 private:
  // uma.token_ids: the comment naming the tokens whose text the chunk carries.
  std::string tokens(std::span<const LogprobEntry> logprobs) const {
    if (!r_.uma.token_ids || logprobs.empty()) return {};
    std::string c = ": tokens";
    for (const LogprobEntry& e : logprobs) c += " " + std::to_string(e.chosen.token);
    return c;
  }

  const openai::CompletionRequest& r_;
  std::string id_;
  std::int64_t created_;
};

}  // namespace

std::unique_ptr<ReplyWriter> openai_writer(const openai::CompletionRequest& r, std::string id, std::int64_t created) {
  return std::make_unique<OpenAiWriter>(r, std::move(id), created);
}

}  // namespace uma
