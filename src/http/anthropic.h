// Anthropic's Messages API (POST /v1/messages) on umad's chat path: a request is translated to
// OpenAI's chat body (system, content blocks, tool_use / tool_result turns, tools with
// input_schema, tool_choice auto/any/tool/none, stop_sequences, thinking) and run as any chat
// request; the answer is written in Anthropic's shape (content blocks, stop_reason, usage) or as
// its stream (message_start, content_block_start / _delta / _stop, message_delta, message_stop).
// Errors keep their HTTP status and take Anthropic's body ({"type":"error","error":{...}}).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "http/reply_writer.h"

namespace uma::anthropic {

// The request as OpenAI's chat body; fields no one defined are named in *ignored. kBadRequest
// naming the field on bad input. count_tokens' body is a request without max_tokens.
Status to_chat_body(std::string_view body, std::string* chat_body, std::vector<std::string>* ignored);
Status count_body_to_chat_body(std::string_view body, std::string* chat_body);

}  // namespace uma::anthropic

namespace uma {

std::unique_ptr<ReplyWriter> anthropic_writer(const openai::CompletionRequest& r, std::string id, std::int64_t created);

}  // namespace uma
