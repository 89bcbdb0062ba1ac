#include "http/http_router.h"

#include "http/anthropic.h"
#include "http/embeddings.h"
#include "http/infill.h"
#include "http/rerank.h"
#include "http/llama_server_api.h"
#include "http/ollama_api.h"
#include "http/responses_api.h"
#include "webui/webui.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <optional>

namespace uma::http_route {

namespace http = boost::beast::http;

Reply error_reply(ErrorCode code, std::string_view message) {
  return Reply{http_status(code), "application/json", http_error_body(code, message), code};
}

Reply error_reply(const Status& st) {
  return Reply{http_status(st.code()), "application/json", http_error_body(st), st.code()};
}

namespace {

// An error reply's Status again (its code, message and param), to write it in another API's shape.
Status status_of(const Reply& r) {
  const auto j = nlohmann::json::parse(r.body, nullptr, false);
  const auto* e = j.is_object() && j.contains("error") && j["error"].is_object() ? &j["error"] : nullptr;
  auto text = [&](const char* key) {
    return e != nullptr && e->contains(key) && (*e)[key].is_string() ? (*e)[key].get<std::string>() : std::string();
  };
  return Status(r.error, text("message"), text("param"));
}

Reply not_ready(const Context& ctx) {
  Reply r = error_reply(ErrorCode::kShuttingDown, ctx.ready ? "shutting down" : "loading the model");
  r.error = ErrorCode::kOk;  // a state, not a client's error
  return r;
}

// A mixed prompt's pieces in turn, text tokenized as llama-server does: control tokens parsed, the
// BOS only before a first piece of text.
Status resolve_mixed(PromptInput& p, const Tokenize& tokenize) {
  for (std::size_t i = 0; i < p.mixed.size(); ++i) {
    const PromptPiece& m = p.mixed[i];
    if (m.text.empty()) {
      p.tokens.insert(p.tokens.end(), m.tokens.begin(), m.tokens.end());
      continue;
    }
    std::vector<std::int32_t> t;
    if (Status st = tokenize(m.text, /*add_special=*/i == 0, /*parse_special=*/true, &t); !st.ok()) return st;
    p.tokens.insert(p.tokens.end(), t.begin(), t.end());
  }
  p.mixed.clear();
  return Status::Ok();
}

std::variant<Reply, Completion> completion(bool chat, std::string_view body, const Context& ctx) {
  if (!ctx.ready || ctx.shutting_down) return not_ready(ctx);
  Completion c;
  if (Status st = openai::parse_request(body, chat, *ctx.limits, *ctx.default_sampling, &c.api); !st.ok()) {
    return error_reply(st);
  }
  // Without a tokenizer here (a gateway), a mixed prompt goes on as it came: the agent resolves it.
  for (PromptInput& p : c.api.prompts) {
    if (p.mixed.empty() || ctx.tokenize == nullptr) continue;
    if (Status st = resolve_mixed(p, *ctx.tokenize); !st.ok()) return error_reply(st);
  }
  Request& q = c.request;
  if (chat) {
    if (ctx.chat_template == nullptr || !*ctx.chat_template) {
      Reply r = error_reply(ErrorCode::kBadRequest, "chat is not available");
      r.error = ErrorCode::kOk;
      return r;
    }
    ChatRequest chat_request{c.api.messages,       c.api.tools, c.api.tool_choice,     c.api.forced_tool,
                             c.api.parallel_tool_calls, c.api.model, c.api.template_kwargs, c.api.enable_thinking,
                             c.api.add_generation_prompt, c.api.continuation};
    ChatPrompt prompt;
    if (Status st = (*ctx.chat_template)(chat_request, &prompt); !st.ok()) return error_reply(st);
    q.prompt = std::move(prompt.text);
    q.images = std::move(c.api.images);
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
    q.images = c.api.prompts.front().images;
  }
  const bool any_images = !q.images.empty() || std::any_of(c.api.prompts.begin(), c.api.prompts.end(),
                                                           [](const PromptInput& p) { return !p.images.empty(); });
  // A gateway (no facts of a model) passes images on: the agent's model says.
  if (any_images && ctx.facts != nullptr && !ctx.facts->vision) {
    return error_reply(Status(ErrorCode::kNotSupported, "image input: this server's model has no vision projector "
                              "(umad --mmproj)", chat ? "messages" : "prompt"));
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
  c.writer = openai_writer;
  c.id_prefix = chat ? "chatcmpl-" : "cmpl-";
  q.tenant = c.api.user;
  q.speculative = c.api.speculative;
  q.prediction = c.api.prediction;
  q.continuation.assign(c.api.uma.resume.begin(), c.api.uma.resume.end());
  q.sampling.report_tokens = c.api.uma.token_ids;
  if (!c.api.uma.prompt_tokens.empty()) {
    if (c.api.prompts.size() > 1) return error_reply(Status(ErrorCode::kBadRequest, "needs one prompt", "uma.prompt_tokens"));
    q.prompt_tokens = c.api.uma.prompt_tokens;  // the gateway's: not tokenized again
  }
  return c;
}

}  // namespace

std::variant<Reply, Completion> completion_request(bool chat, std::string_view body, const Context& ctx) {
  return completion(chat, body, ctx);
}

// An API's request translated to OpenAI's chat body, run as chat, answered in the API's shape.
std::variant<Reply, Completion> translated(Status (*translate)(std::string_view, std::string*, std::vector<std::string>*),
                                           WriterFactory writer, const char* id_prefix, std::string_view body,
                                           const Context& ctx) {
  std::string chat_body;
  std::vector<std::string> ignored;
  Status st = translate(body, &chat_body, &ignored);
  if (st.ok() && ctx.limits->strict_fields && !ignored.empty()) {
    st = Status(ErrorCode::kBadRequest, "'" + ignored[0] + "' is not a field umad knows", ignored[0]);
  }
  auto result = st.ok() ? completion(true, chat_body, ctx) : std::variant<Reply, Completion>(error_reply(st));
  if (auto* r = std::get_if<Reply>(&result); r != nullptr && r->status >= 400 && r->error != ErrorCode::kOk) {
    // The API's own error shape.
    const openai::CompletionRequest none;
    r->body = writer(none, "", 0)->error_body(status_of(*r));
  }
  if (auto* c = std::get_if<Completion>(&result)) {
    c->writer = std::move(writer);
    c->id_prefix = id_prefix;
    c->chat_body = std::move(chat_body);
    c->api.ignored_fields.insert(c->api.ignored_fields.end(), ignored.begin(), ignored.end());
  }
  return result;
}

// POST /v1/embeddings: text is tokenized here, on the front end; the scheduler embeds tokens.
std::variant<Reply, Completion> embeddings_request(std::string_view body, const Context& ctx) {
  if (!ctx.ready || ctx.shutting_down) return not_ready(ctx);
  embeddings::Request e;
  if (Status st = embeddings::parse(body, ctx.limits->max_prompt_bytes, ctx.limits->strict_fields, &e); !st.ok()) {
    return error_reply(st);
  }
  if (e.dimensions && *e.dimensions != ctx.facts->n_embd) {
    return error_reply(Status(ErrorCode::kBadRequest, "'dimensions' must be the model's " + std::to_string(ctx.facts->n_embd) +
                                                          " (umad does not shorten embeddings)", "dimensions"));
  }
  Completion c;
  c.api.model = e.model;
  c.api.embedding = true;
  c.api.embedding_base64 = e.base64;
  c.api.ignored_fields = std::move(e.ignored);
  c.id_prefix = "embd-";
  for (const PromptInput& in : e.inputs) {
    std::vector<std::int32_t> tokens = in.tokens;
    if (tokens.empty()) {
      if (Status st = (*ctx.tokenize)(in.text, /*add_special=*/true, /*parse_special=*/false, &tokens); !st.ok()) {
        return error_reply(st);
      }
    }
    c.request.embed_inputs.push_back(std::move(tokens));
  }
  return c;
}

// POST /rerank: a pass of (query, document) pairs through the reranker's classifier.
std::variant<Reply, Completion> rerank_request(std::string_view body, const Context& ctx) {
  if (!ctx.ready || ctx.shutting_down) return not_ready(ctx);
  if (!ctx.facts->reranker) {
    return error_reply(Status(ErrorCode::kNotSupported, "This server does not support reranking: its model is not a reranker "
                                                        "(a model whose pooling type is rank)"));
  }
  rerank::Request r;
  if (Status st = rerank::parse(body, ctx.limits->max_prompt_bytes, &r); !st.ok()) return error_reply(st);
  Completion c;
  c.api.model = r.model.empty() ? std::string(ctx.model_id) : r.model;
  c.api.embedding = true;
  c.api.embedding_shape = openai::EmbeddingShape::kRerank;
  c.api.rerank = {r.top_n, r.tei, r.return_text, {}};
  c.id_prefix = "rerank-";
  for (const std::string& doc : r.documents) {
    std::vector<std::int32_t> tokens;
    if (Status st = rerank::pair_tokens(r.query, doc, ctx, &tokens); !st.ok()) return error_reply(st);
    c.request.embed_inputs.push_back(std::move(tokens));
  }
  if (r.return_text) c.api.rerank.documents = std::move(r.documents);
  return c;
}

std::variant<Reply, Completion> native_completion_request(std::string_view body, const Context& ctx) {
  auto result = completion(false, body, ctx);
  if (auto* c = std::get_if<Completion>(&result)) {
    c->writer = llama_server_writer;
    c->id_prefix = "completion-";
    c->request.max_tokens_to_context_end = true;
    c->request.report_progress = c->api.return_progress && c->api.stream;
  }
  return result;
}

namespace {

// A POST to one of the completion, embeddings, reranking or vocabulary endpoints; none for any
// other path. `vocab`: this server has the model's vocabulary (umad itself, not a router).
std::optional<Routed> route_post(const std::string& path, std::string_view body, const Context& ctx, bool vocab) {
  // Counted as a request once the daemon serves completions (not while loading or stopping).
  const bool serving = ctx.ready && !ctx.shutting_down;
  // What only umad serves, asked of a server without the model (its router, a gateway's relay).
  const auto only_umad = [](const std::string& what) {
    Reply r = error_reply(ErrorCode::kNotFound, what + " served by umad itself, not through this server");
    r.error = ErrorCode::kOk;
    return Routed{false, std::move(r)};
  };
  if (path == "/v1/chat/completions" || path == "/v1/completions") {
    return Routed{serving, completion(path == "/v1/chat/completions", body, ctx)};
  }
  if (path == "/completion") return Routed{serving, native_completion_request(body, ctx)};
  if (path == "/infill") {
    if (!vocab) return only_umad("infill is");
    std::string native;
    if (Status st = infill_body(body, ctx, &native); !st.ok()) return Routed{false, error_reply(st)};
    return Routed{serving, native_completion_request(native, ctx)};
  }
  if (path == "/rerank" || path == "/v1/rerank" || path == "/reranking" || path == "/v1/reranking") {
    if (!vocab) return only_umad("reranking is");
    return Routed{serving, rerank_request(body, ctx)};
  }
  if (path == "/v1/embeddings") {
    if (!vocab) return only_umad("embeddings are");
    return Routed{serving, embeddings_request(body, ctx)};
  }
  if (path == "/v1/messages") return Routed{serving, translated(anthropic::to_chat_body, anthropic_writer, "msg_", body, ctx)};
  if (path == "/v1/responses") return Routed{serving, translated(responses::to_chat_body, responses_writer, "resp_", body, ctx)};
  if (path == "/tokenize" || path == "/detokenize" || path == "/apply-template" || path == "/v1/messages/count_tokens") {
    if (!vocab) return only_umad("this endpoint is");
    if (!ctx.ready || ctx.shutting_down) return Routed{false, not_ready(ctx)};
    return Routed{false, vocabulary_endpoint(path, body, ctx)};
  }
  return std::nullopt;
}

}  // namespace

Routed route(http::verb method, std::string_view target, std::string_view body, const Context& ctx) {
  if (auto q = target.find('?'); q != std::string_view::npos) target = target.substr(0, q);
  // llama-server's and vLLM's paths without /v1 are the same endpoints.
  std::string path(target);
  if (path == "/chat/completions" || path == "/completions" || path == "/models" || path == "/embeddings" ||
      path == "/responses") {
    path = "/v1" + path;
  }
  if (path == "/v1/health") path = "/health";
  if (auto ollama = ollama_route(method, path, body, ctx)) return std::move(*ollama);
  const bool get = method == http::verb::get;
  const bool post = method == http::verb::post;
  if (get && ctx.webui) {
    if (const auto page = webui::asset(path)) return {false, Reply{200, std::string(page->content_type), std::string(page->body)}};
  }
  if (path == "/health" && get) {
    if (!ctx.ready || ctx.shutting_down) return {false, not_ready(ctx)};
    return {false, Reply{200, "application/json", R"({"status":"ok"})", ErrorCode::kOk}};
  }
  if (path == "/v1/models" && get) return {false, Reply{200, "application/json", models_body(ctx)}};
  const auto turned_off = [](const char* what, const char* flag) {
    return error_reply(Status(ErrorCode::kNotSupported, std::string("this server does not serve ") + what +
                                                            " (started with " + flag + ")"));
  };
  if (path == "/metrics" && get && !ctx.metrics_endpoint) return {false, turned_off("/metrics", "--no-metrics")};
  if (path == "/slots" && get && !ctx.slots_endpoint) return {false, turned_off("/slots", "--no-slots")};
  if (path == "/metrics" && get) {
    return {false, Reply{200, "text/plain; version=0.0.4", ctx.metrics != nullptr ? ctx.metrics->to_prometheus() : ""}};
  }
  const bool vocab = ctx.tokenize != nullptr && *ctx.tokenize && ctx.facts != nullptr;
  if (vocab && (path == "/props" || path == "/slots") && get) {
    return {false, Reply{200, "application/json", path == "/props" ? props_body(ctx) : slots_body(ctx)}};
  }
  if (post) {
    if (auto routed = route_post(path, body, ctx, vocab)) return std::move(*routed);
  }
  static const char* const kKnown[] = {"/health", "/v1/models", "/metrics", "/v1/chat/completions", "/v1/completions",
                                       "/completion", "/v1/messages", "/v1/responses", "/props", "/slots", "/tokenize",
                                       "/detokenize", "/apply-template", "/v1/messages/count_tokens", "/v1/embeddings", "/infill",
                                       "/rerank", "/v1/rerank", "/reranking", "/v1/reranking"};
  bool known = false;
  for (const char* k : kKnown) known = known || path == k;
  Reply r = known ? error_reply(ErrorCode::kBadRequest, "method not allowed")
                  : error_reply(ErrorCode::kNotFound, "no such endpoint: " + std::string(target));
  r.status = known ? 405 : 404;
  r.error = ErrorCode::kOk;
  return {false, std::move(r)};
}

}  // namespace uma::http_route
