// ReplyWriter: one completion's answer in the shape of the API it came in by (OpenAI's chat and
// completions, Anthropic's Messages, OpenAI's Responses, llama-server's /completion). The HTTP
// adapter (http_server.cc) runs the request the same way whatever the API: it collects each
// choice's text and tool calls, decides when the stream opens and how it ends; a writer only says
// how each of those moments is written. Streamed moments are appended to `out` as whole SSE
// events, each in its own HTTP chunk (sse_event).
//
// Thread-safety: none; one writer per request, used on the I/O thread of its connection.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "serve/chat_types.h"
#include "common/status.h"
#include "http/openai.h"
#include "serve/sampling.h"

namespace uma {

// How a choice ended: OpenAI's finish reason (stop, length, tool_calls) and the stop string that
// ended it, if one did.
struct ChoiceEnd {
  std::string_view reason;
  std::string_view stop_word;
};

// How far a prompt's prefill is (llama-server's prompt_progress): its tokens, those the cache gave,
// those in KV so far, and the milliseconds since its prefill began.
struct PromptProgress {
  std::int32_t total = 0, cache = 0, processed = 0;
  double time_ms = 0.0;
};

// One choice of a whole (non-streamed) answer.
struct WholeChoice {
  std::string_view text;
  std::string_view reasoning;
  ChoiceEnd end;
  std::span<const LogprobEntry> logprobs;
  std::span<const ToolCall> calls;
};

class ReplyWriter {
 public:
  virtual ~ReplyWriter() = default;
  // Before open(), when the first token says it: the prompt's tokens, and those the cache gave.
  virtual void prompt_known(std::int32_t prompt_tokens, std::int32_t cached_tokens) {
    (void)prompt_tokens;
    (void)cached_tokens;
  }
  // A streamed request that asked for its prompt's progress, after each chunk of its prefill.
  virtual void progress(const PromptProgress& p, std::string& out) {
    (void)p;
    (void)out;
  }
  // The stream's content type: SSE unless the API streams otherwise (Ollama's JSON lines).
  virtual std::string_view stream_content_type() const { return "text/event-stream"; }
  // After the stream's head: what opens it (`choices` of them).
  virtual void open(std::size_t choices, std::string& out) = 0;
  // A piece of choice `index`: text, reasoning or a tool call's piece; `logprobs`: the tokens whose
  // text it released; `text_offset`: the choice's text bytes before it.
  virtual void delta(std::size_t index, const ChatDelta& d, std::span<const LogprobEntry> logprobs,
                     std::size_t text_offset, std::string& out) = 0;
  // Choice `index` ended (with the logprobs of tokens not yet sent).
  virtual void finish(std::size_t index, const ChoiceEnd& end, std::span<const LogprobEntry> logprobs,
                      std::size_t text_offset, std::string& out) = 0;
  // Every choice ended well: what closes the stream (usage, the API's last event), without the
  // HTTP terminator.
  virtual void close(const openai::Usage& usage, std::string& out) = 0;
  // An error after the stream opened: its event (the stream then ends).
  virtual void fail(const Status& st, std::string& out) = 0;
  // The whole answer's body (not streamed).
  virtual std::string whole(std::span<const WholeChoice> choices, const openai::Usage& usage) = 0;
  // An error answer's body, in the API's shape (the HTTP status is openai::http_status's).
  virtual std::string error_body(const Status& st) const = 0;
};

// One SSE event in one HTTP chunk: `event: NAME` when named, then `data: DATA`. `comment`, when
// not empty, goes first as an SSE comment line (readers skip it).
void sse_event(std::string& out, std::string_view data, std::string_view name = {}, std::string_view comment = {});

// OpenAI's chat completions and completions, as openai.h encodes them. With uma.token_ids (a
// gateway's), each chunk is preceded by a `: tokens ID ...` comment naming its tokens.
std::unique_ptr<ReplyWriter> openai_writer(const openai::CompletionRequest& r, std::string id, std::int64_t created);

}  // namespace uma
