// Routing of one parsed HTTP request: method + target + body in, what to answer out. No sockets,
// no I/O, no state of its own, so the fuzz target (fuzz/http_fuzz.cc) drives exactly what the
// server runs with whatever bytes a client sends.
//
// Contract: route() never throws on client input (every JSON read is type-checked in
// openai::parse_request; every body it emits is valid JSON whatever bytes the target held). It
// reads the metrics (any thread may) and calls the chat renderer, which must not throw either; the
// server's exception boundary (HttpServer::guarded) is the net for a renderer or bug that does.
#pragma once

#include <boost/beast/http/verb.hpp>

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "common/status.h"
#include "http/openai.h"
#include "metrics/server_metrics.h"
#include "sched/request.h"

namespace uma::http_route {

// Renders a chat request (turns, tools) to a prompt with the model's or the configured template,
// and with tools, the grammar and the output parser (chat/chat_types.h).
using ChatTemplate = std::function<Status(const ChatRequest&, ChatPrompt*)>;

struct Context {
  bool ready = false;          // the model is loaded
  bool shutting_down = false;
  std::string_view model_id = "umad";
  const ChatTemplate* chat_template = nullptr;  // null or empty: chat is not available
  const openai::Limits* limits = nullptr;
  const SamplingParams* default_sampling = nullptr;
  const SchemaToGrammar* schema_to_grammar = nullptr;  // null or empty: response_format json is refused
  const ServerMetrics* metrics = nullptr;
};

// A whole answer with a body. `error` is the kind the errors counter counts (kOk: not counted).
struct Reply {
  unsigned status = 200;
  std::string content_type = "application/json";
  std::string body;
  ErrorCode error = ErrorCode::kOk;
};

// A completion to run: the API's view (for encoding the answer) and the scheduler's (without an
// id or arrival time yet: the server assigns those).
struct Completion {
  openai::CompletionRequest api;
  Request request;
  std::unique_ptr<ChatOutputParser> tool_parser;  // tools the model may call: reads its calls
};

struct Routed {
  bool completion_endpoint = false;  // POST /v1/completions or /v1/chat/completions while serving (requests_total)
  std::variant<Reply, Completion> action;
};

Routed route(boost::beast::http::verb method, std::string_view target, std::string_view body, const Context& ctx);

// An error answer in OpenAI's shape with the status for `code`, counted under `code`.
Reply error_reply(ErrorCode code, std::string_view message);
Reply error_reply(const Status& st);  // names st.param() as OpenAI's `param`

}  // namespace uma::http_route
