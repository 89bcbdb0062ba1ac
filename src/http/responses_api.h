// OpenAI's Responses API, stateless (POST /v1/responses): `input` (a string or items: messages,
// function_call, function_call_output), `instructions`, function tools, `text.format`
// (json_schema / json_object), `max_output_tokens`, `reasoning.effort`, translated to the chat
// body and run as any chat request; the answer is a `response` object (output items: message,
// function_call, reasoning) or its stream of typed events (response.created ... response.completed,
// each with a sequence_number). umad keeps no responses: `previous_response_id`, `store: true` and
// `background: true` are a 400 naming the field.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "http/reply_writer.h"

namespace uma::responses {

Status to_chat_body(std::string_view body, std::string* chat_body, std::vector<std::string>* ignored);

}  // namespace uma::responses

namespace uma {

std::unique_ptr<ReplyWriter> responses_writer(const openai::CompletionRequest& r, std::string id, std::int64_t created);

}  // namespace uma
