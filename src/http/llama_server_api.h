// llama-server's own API for users moving from it, with its fields' meaning: /completion's answer
// shape (content, stop, tokens_predicted, ...), /props, /slots (read-only), /tokenize,
// /detokenize, /apply-template; and what needs the model's vocabulary on the front end
// (Anthropic's count_tokens). Also the /v1/models body (OpenAI's, with the model's context).
// Pure functions of the request and the router's Context; they run on the I/O thread.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "http/http_router.h"
#include "http/reply_writer.h"

namespace uma::http_route {

std::string models_body(const Context& ctx);
std::string props_body(const Context& ctx);
std::string slots_body(const Context& ctx);
// POST /tokenize, /detokenize, /apply-template, /v1/messages/count_tokens (ctx.tokenize set).
Reply vocabulary_endpoint(const std::string& path, std::string_view body, const Context& ctx);

}  // namespace uma::http_route

namespace uma {

// llama-server's /completion answer: {"content", "stop", "tokens_predicted", "tokens_evaluated",
// "stop_type", "stopping_word", ...}; streamed, one such object per `data:` line, the last with
// "stop": true (no [DONE]).
std::unique_ptr<ReplyWriter> llama_server_writer(const openai::CompletionRequest& r, std::string id, std::int64_t created);
// That answer's object for one whole choice, every field (an OpenAI answer's "__verbose").
std::string llama_server_final(const openai::CompletionRequest& r, const WholeChoice& c, const openai::Usage& u);

}  // namespace uma
