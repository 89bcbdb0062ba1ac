// Reencoder: the gateway's answer to a client of another API (Anthropic's Messages, OpenAI's
// Responses) out of what agents speak (OpenAI's chat completions): each chunk of an agent's stream
// is read back into its pieces (content, reasoning, tool-call pieces, finish reason, usage) and
// written by the client API's ReplyWriter (http/reply_writer.h); a whole answer likewise. Agents
// are asked for usage in the stream (stream_options.include_usage), which Anthropic's message_delta
// and Responses' response.completed carry.
//
// Thread-safety: none; one per proxied request, on the gateway's I/O thread.
#pragma once

#include <chrono>
#include <optional>

#include <memory>
#include <string>
#include <string_view>

#include "gateway/sse_events.h"
#include "http/http_router.h"
#include "http/openai.h"

namespace uma::gateway {

class Reencoder {
 public:
  Reencoder(openai::CompletionRequest api, const http_route::WriterFactory& writer, std::string id, std::int64_t created);
  // What opens the client's stream (after its head); prompt_tokens: as this gateway counted them.
  std::string open(std::int64_t prompt_tokens);
  // One event of the agent's stream (its `forward` part), as the client's API writes it (HTTP
  // chunks; "" for what it has nothing to say about). [DONE] closes the stream (the HTTP
  // terminator is the caller's).
  std::string event(const SseEvent& ev);
  // A mid-stream failure, terminator included.
  std::string fail(const Status& st);
  // A whole (non-streamed) answer of the agent: the client API's body; an error keeps its status.
  std::string whole(unsigned status, std::string_view agent_body);
  std::string error_body(const Status& st) const { return writer_->error_body(st); }
  std::string_view stream_content_type() const { return writer_->stream_content_type(); }

 private:
  static double ms_since(std::chrono::steady_clock::time_point t);

  openai::CompletionRequest api_;  // the writer reads it: it lives as long
  std::chrono::steady_clock::time_point started_;
  std::optional<std::chrono::steady_clock::time_point> first_token_;
  std::unique_ptr<ReplyWriter> writer_;
  openai::Usage usage_;
  bool finished_ = false;
};

}  // namespace uma::gateway
