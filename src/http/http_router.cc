#include "http/http_router.h"

namespace uma::http_route {

namespace http = boost::beast::http;

Reply error_reply(ErrorCode code, std::string_view message) {
  return Reply{openai::http_status(code), "application/json", openai::error_body(code, message), code};
}

Reply error_reply(const Status& st) {
  return Reply{openai::http_status(st.code()), "application/json", openai::error_body(st), st.code()};
}

namespace {

Reply not_ready(const Context& ctx) {
  Reply r = error_reply(ErrorCode::kShuttingDown, ctx.ready ? "shutting down" : "loading the model");
  r.error = ErrorCode::kOk;  // a state, not a client's error
  return r;
}

std::variant<Reply, Completion> completion(bool chat, std::string_view body, const Context& ctx) {
  if (!ctx.ready || ctx.shutting_down) return not_ready(ctx);
  Completion c;
  if (Status st = openai::parse_request(body, chat, *ctx.limits, *ctx.default_sampling, &c.api); !st.ok()) {
    return error_reply(st);
  }
  Request& q = c.request;
  if (chat) {
    if (ctx.chat_template == nullptr || !*ctx.chat_template) {
      Reply r = error_reply(ErrorCode::kBadRequest, "chat is not available");
      r.error = ErrorCode::kOk;
      return r;
    }
    ChatRequest chat_request{c.api.messages, c.api.tools, c.api.tool_choice, c.api.forced_tool,
                             c.api.parallel_tool_calls, c.api.model, c.api.template_kwargs, c.api.enable_thinking};
    ChatPrompt prompt;
    if (Status st = (*ctx.chat_template)(chat_request, &prompt); !st.ok()) return error_reply(st);
    q.prompt = std::move(prompt.text);
    q.parse_special = true;  // the template's control tokens
    q.sampling.grammar = std::move(prompt.grammar);
    q.sampling.grammar_lazy = prompt.grammar_lazy;
    q.sampling.grammar_triggers = std::move(prompt.grammar_triggers);
    q.sampling.grammar_prefill = std::move(prompt.grammar_prefill);
    q.stop.insert(q.stop.end(), prompt.stops.begin(), prompt.stops.end());
    c.tool_parser = std::move(prompt.parser);
  } else {
    q.prompt = c.api.prompts.front().text;
    q.prompt_tokens = c.api.prompts.front().tokens;
  }
  q.max_tokens = c.api.max_tokens.value_or(0);  // 0: the daemon's default (the scheduler applies it)
  {
    // The template's grammar (tools) stays; the request's own sampling settings join it.
    SamplingParams s = c.api.sampling;
    s.grammar = std::move(q.sampling.grammar);
    s.grammar_lazy = q.sampling.grammar_lazy;
    s.grammar_triggers = std::move(q.sampling.grammar_triggers);
    s.grammar_prefill = std::move(q.sampling.grammar_prefill);
    q.sampling = std::move(s);
  }
  if (!c.api.grammar.empty()) q.sampling.grammar = c.api.grammar;
  if (!c.api.json_schema.empty()) {
    const Status st = ctx.schema_to_grammar != nullptr && *ctx.schema_to_grammar
                          ? (*ctx.schema_to_grammar)(c.api.json_schema, &q.sampling.grammar)
                          : Status(ErrorCode::kBadRequest, "structured output is not available");
    if (!st.ok()) return error_reply(Status(st.code(), st.message(), "response_format"));
    q.sampling.grammar_lazy = false;
  }
  q.stop.insert(q.stop.begin(), c.api.stop.begin(), c.api.stop.end());
  q.tenant = c.api.user;
  q.continuation.assign(c.api.uma.resume.begin(), c.api.uma.resume.end());
  q.sampling.report_tokens = c.api.uma.token_ids;
  return c;
}

}  // namespace

Routed route(http::verb method, std::string_view target, std::string_view body, const Context& ctx) {
  if (auto q = target.find('?'); q != std::string_view::npos) target = target.substr(0, q);
  const bool get = method == http::verb::get;
  if (target == "/health" && get) {
    if (!ctx.ready || ctx.shutting_down) return {false, not_ready(ctx)};
    return {false, Reply{200, "application/json", R"({"status":"ok"})", ErrorCode::kOk}};
  }
  if (target == "/v1/models" && get) return {false, Reply{200, "application/json", openai::models(ctx.model_id, 0)}};
  if (target == "/metrics" && get) {
    return {false, Reply{200, "text/plain; version=0.0.4", ctx.metrics != nullptr ? ctx.metrics->to_prometheus() : ""}};
  }
  const bool chat = target == "/v1/chat/completions";
  if ((chat || target == "/v1/completions") && method == http::verb::post) {
    // Counted as a request once the daemon serves completions (not while loading or stopping).
    return {ctx.ready && !ctx.shutting_down, completion(chat, body, ctx)};
  }
  const bool known = chat || target == "/health" || target == "/v1/completions" || target == "/v1/models" || target == "/metrics";
  Reply r = known ? error_reply(ErrorCode::kBadRequest, "method not allowed")
                  : error_reply(ErrorCode::kBadRequest, "no such endpoint: " + std::string(target));
  r.status = known ? 405 : 404;
  r.error = ErrorCode::kOk;
  return {false, std::move(r)};
}

}  // namespace uma::http_route
