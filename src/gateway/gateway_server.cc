#include "gateway/gateway_server.h"

#include <boost/asio/post.hpp>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <random>
#include <set>

#include "common/json_text.h"
#include "http/ollama_api.h"
#include "serve/block_hash.h"
#include "webui/webui.h"

namespace uma::gateway {

namespace asio = boost::asio;
namespace http = boost::beast::http;

namespace {

std::string random_prefix() {
  std::random_device rd;
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08x", rd());
  return buf;
}

RequestServerConfig server_config(const GatewayConfig& c) {
  RequestServerConfig rc;
  rc.host = c.host;
  rc.port = c.port;
  rc.access = AccessPolicy{c.api_key, c.cors_origin, {"/health"}};
  if (c.webui) rc.access.open_paths.insert(rc.access.open_paths.end(), std::begin(webui::kPaths), std::end(webui::kPaths));
  rc.max_connections = c.max_connections;
  rc.limits = HttpLimits{c.max_header_bytes, c.max_body_bytes};
  rc.max_tx_bytes = c.max_tx_bytes;
  rc.timeout = std::chrono::seconds(c.timeout_sec);
  rc.log_name = "gw";
  return rc;
}

// A request the gateway only forwards may not carry what umad takes from a gateway.
bool asks_for_gateway_fields(const openai::GatewayOptions& g) {
  return g.token_ids || !g.resume.empty() || !g.id.empty() || g.created != 0 || !g.prompt_tokens.empty();
}

// What only a model's own server answers (the gateway holds no weights): relayed as it came to an
// agent serving the named model, in the API of its path.
enum class Relay : std::uint8_t { kNone, kOpenAi, kOllama };

Relay relayed(std::string_view path) {
  for (const char* p : {"/v1/embeddings", "/embeddings", "/rerank", "/v1/rerank", "/reranking", "/v1/reranking", "/infill"}) {
    if (path == p) return Relay::kOpenAi;
  }
  for (const char* p : {"/api/embed", "/api/embeddings", "/api/show"}) {
    if (path == p) return Relay::kOllama;
  }
  return Relay::kNone;
}

// Ollama's generate with a suffix (fill in the middle) is built from the model's own FIM tokens,
// which only its server has: relayed too.
bool fills_in_the_middle(const nlohmann::json& j) {
  const auto it = j.find("suffix");
  return it != j.end() && it->is_string() && !it->get_ref<const std::string&>().empty();
}

// The model a relayed body names ("": none, any agent answers), or why it is not one to relay.
Status relayed_model(const nlohmann::json& j, Relay api, std::string* model) {
  if (!j.is_object()) return Status(ErrorCode::kInvalidJson, "the body is not a JSON object");
  for (const char* field : {"model", "name"}) {  // "name": Ollama's older field
    const auto it = j.find(field);
    if (it == j.end() || it->is_null() || (api != Relay::kOllama && std::string_view(field) == "name")) continue;
    if (!it->is_string()) return Status(ErrorCode::kBadRequest, std::string("'") + field + "' must be a string", field);
    *model = it->get<std::string>();
    break;
  }
  return Status::Ok();
}

}  // namespace

struct GatewayServer::Prepared {
  std::atomic<bool> cancelled{false};  // set on the I/O thread when its client goes
  http::verb method = http::verb::post;
  std::string target;
  std::string body;
  std::optional<http_route::Reply> reply;  // answered by the gateway itself (a bad request, 404, ...)
  http_route::Completion completion;
  SteadyClock::time_point received_at{};
  Status status;  // the vocabulary's or the tokenizer's
  std::vector<Token> tokens;
  std::vector<std::uint64_t> blocks;
  Relay relay = Relay::kNone;  // relayed whole to an agent (its model named in relay_model)
  std::string relay_model;
};

GatewayServer::GatewayServer(asio::io_context& io, GatewayConfig config, AgentDirectory& agents, VocabCache& vocabs,
                             SchemaToGrammar schema_to_grammar, ColdLoads* cold_loads)
    : io_(io), config_(std::move(config)), agents_(agents), vocabs_(vocabs),
      schema_to_grammar_(std::move(schema_to_grammar)), upstream_pool_(io), pulls_(io, {.api_key = config_.agent_key}),
      server_(io, server_config(config_), [this](const HttpExchangePtr& ex) { handle(ex); }), sweep_timer_(io),
      tokenizers_(static_cast<std::size_t>(std::max(1, config_.tokenize_threads))), id_prefix_(random_prefix()),
      waiting_(static_cast<std::size_t>(std::max(0, config_.max_queue))), fan_out_(config_.fan_out) {
  cold_loads_ = cold_loads;
  if (cold_loads_ != nullptr) {
    cold_loads_->set_migration(
        [this](const std::string& model, const std::string& loader) {
          return agents_.serving(model, cluster::loaded_model_agent_id(loader, model)) > 0;
        },
        [this](const std::string& loader, const std::vector<std::string>& models) {
          std::size_t moved = 0;
          for (const std::string& m : models) moved += move_streams(cluster::loaded_model_agent_id(loader, m), "room for a load on " + loader);
          return moved;
        });
  }
}

GatewayServer::~GatewayServer() {
  if (cold_loads_ != nullptr) cold_loads_->set_migration(nullptr, nullptr);
  stop();
  tokenizers_.stop();  // what is queued there is dropped, not tokenized
  tokenizers_.join();  // nothing of ours runs on them past here
}

void GatewayServer::start() {
  stopped_ = false;
  server_.start();
  sweep();
}

void GatewayServer::stop() {
  if (stopped_) return;
  stopped_ = true;
  sweep_timer_.cancel();
  server_.stop();  // every client goes: their proxies let go of their agents
}

void GatewayServer::retire(std::unique_ptr<Proxy> p) {
  // Never freed inside its own callback: the loop frees it once the current handler returns.
  asio::post(io_, [p = std::shared_ptr<Proxy>(std::move(p))] {});
}

void GatewayServer::client_gone(HttpExchange* ex) {
  auto it = inflight_.find(ex);
  if (it == inflight_.end()) return;
  if (it->second.preparing) {
    // Its tokenizer thread skips it; the entry (and the server's count of it) stays until then.
    it->second.preparing->cancelled = true;
    return;
  }
  if (it->second.proxy) {
    it->second.proxy->client_gone();
    retire(std::move(it->second.proxy));
  }
  inflight_.erase(it);
}

void GatewayServer::handle(const HttpExchangePtr& ex) {
  const auto received_at = SteadyClock::now();
  const HttpRequest& req = ex->request();
  if (req.method == http::verb::get && req.path == "/health") {
    // Ready while it can serve: some agent is live, or a loader can load a model on demand (a cold
    // cluster has no agent until its first request). A draining gateway is not ready.
    const std::size_t live = agents_.live();
    const bool ready = !server_.draining() && (live > 0 || loads_on_demand());
    const char* status = server_.draining() ? "draining" : ready ? "ok" : "no agents";
    const std::string body = "{\"status\":\"" + std::string(status) + "\",\"agents\":" + std::to_string(agents_.size()) +
                             ",\"live\":" + std::to_string(live) + ",\"loaders\":" + std::to_string(agents_.loaders().size()) + "}";
    return ex->reply_json(ready ? 200 : 503, body);
  }
  if (req.method == http::verb::get && req.path == "/metrics") return ex->reply(200, "text/plain; version=0.0.4", metrics_text());
  if (req.method == http::verb::get && req.path == "/v1/models") {
    nlohmann::ordered_json data = nlohmann::ordered_json::array();
    std::set<std::string> ids;
    for (const std::string& m : agents_.models()) ids.insert(m);
    for (const std::string& m : agents_.catalog()) ids.insert(m);
    for (const std::string& m : ids) data.push_back({{"id", m}, {"object", "model"}, {"owned_by", "uma"}});
    return ex->reply_json(200, to_json_text(nlohmann::ordered_json{{"object", "list"}, {"data", data}}));
  }
  if (req.method == http::verb::get && (req.path == "/api/tags" || req.path == "/api/ps")) {
    // Ollama's listings: every model an agent serves (and, for tags, the catalog's); the sizes
    // and details are the agents' to tell.
    std::set<std::string> ids;
    for (const std::string& m : agents_.models()) ids.insert(m);
    if (req.path == "/api/tags") {
      for (const std::string& m : agents_.catalog()) ids.insert(m);
    }
    nlohmann::ordered_json models = nlohmann::ordered_json::array();
    for (const std::string& m : ids) models.push_back({{"name", m}, {"model", m}, {"size", 0}, {"digest", ""}});
    return ex->reply_json(200, to_json_text(nlohmann::ordered_json{{"models", models}}));
  }
  if (req.method == http::verb::post && req.path == "/api/pull") return pull(ex);
  if (req.method != http::verb::post) {  // nothing to parse or tokenize: a 404 or 405
    const http_route::Routed routed = http_route::route(req.method, req.target, req.body, route_context(nullptr));
    const auto& reply = std::get<http_route::Reply>(routed.action);
    if (reply.status >= 400) metrics_.bad_requests_total++;
    return ex->reply(reply.status, reply.content_type, reply.body);
  }
  // Parsing, rendering and tokenizing off the I/O thread (see the header); the connection serves
  // nothing more meanwhile (what comes in is kept, and a hang-up is seen).
  auto p = std::make_shared<Prepared>();
  p->method = req.method;
  p->target = req.target;
  p->body = ex->take_body();  // `req` is not read after this
  p->received_at = received_at;
  HttpExchange* key = ex.get();
  inflight_[key] = InFlight{ex, p, nullptr};
  ex->on_gone([this, key] { client_gone(key); });
  asio::post(tokenizers_, [this, key, p]() mutable {
    if (!p->cancelled) prepare(*p);
    // Back on the I/O thread, which also drops the last reference there.
    asio::post(io_, [this, key, p = std::move(p)] { prepared(key, *p); });
  });
}

// Ollama's pull of a catalog model (gateway/model_pull.h); its answers are Ollama's shape.
void GatewayServer::pull(const HttpExchangePtr& ex) {
  const nlohmann::json body = nlohmann::json::parse(ex->request().body, nullptr, false);
  const auto error = [&ex](unsigned status, const std::string& why) {
    ex->reply_json(status, to_json_text(nlohmann::ordered_json{{"error", why}}));
  };
  if (!body.is_object()) return error(400, "the body is not a JSON object");
  const auto text = [&body](const char* field) {
    const auto it = body.find(field);
    return it != body.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  const std::string model = !text("model").empty() ? text("model") : text("name");  // "name": Ollama's older field
  if (model.empty()) return error(400, "'model' is required (a string)");
  const auto s = body.find("stream");
  if (s != body.end() && !s->is_boolean() && !s->is_null()) return error(400, "'stream' must be a boolean");
  const bool stream = s == body.end() || s->is_null() || s->get<bool>();
  const AgentDirectory::ModelLookup found = agents_.lookup(model);
  if (found == AgentDirectory::ModelLookup::kUnknown) {
    return error(404, "pull model manifest: model '" + model + "' is not in the catalog");
  }
  pulls_.pull(ex, model, stream, found == AgentDirectory::ModelLookup::kServed, agents_.loaders());
}

http_route::Context GatewayServer::route_context(const ChatTemplate* chat_template) const {
  http_route::Context ctx;
  ctx.ready = true;
  ctx.model_id = "uma-gw";
  ctx.webui = config_.webui;
  ctx.chat_template = chat_template;
  ctx.limits = &config_.limits;
  ctx.default_sampling = &config_.default_sampling;
  ctx.schema_to_grammar = &schema_to_grammar_;
  return ctx;
}

// On a tokenizer thread: the request checked as umad checks it, rendered with its model's template
// and tokenized with its vocabulary (a vocabulary not yet resident is loaded here: gateway/vocab_cache.h).
void GatewayServer::prepare(Prepared& p) {
  const std::string_view path = std::string_view(p.target).substr(0, p.target.find('?'));
  p.relay = relayed(path);
  const bool maybe_fim = path == "/api/generate" && p.body.find("\"suffix\"") != std::string::npos;  // one parse, only then
  if (p.relay != Relay::kNone || maybe_fim) {
    const nlohmann::json j = nlohmann::json::parse(p.body, nullptr, false);
    if (p.relay == Relay::kNone && j.is_object() && fills_in_the_middle(j)) p.relay = Relay::kOllama;
    if (p.relay != Relay::kNone) {
      p.status = relayed_model(j, p.relay, &p.relay_model);
      return;
    }
  }
  std::shared_ptr<const Vocabulary> vocab;
  Status vocab_status;
  const ChatTemplate render = [&](const ChatRequest& request, ChatPrompt* out) {
    vocab = vocabs_.get(request.model, &vocab_status);
    return vocab ? vocab->render(request, out) : vocab_status;
  };
  http_route::Routed routed = http_route::route(p.method, p.target, p.body, route_context(&render));
  if (auto* reply = std::get_if<http_route::Reply>(&routed.action)) {
    p.reply = std::move(*reply);
    return;
  }
  p.completion = std::move(std::get<http_route::Completion>(routed.action));
  if (!vocab && !(vocab = vocabs_.get(p.completion.api.model, &vocab_status))) {
    p.status = vocab_status;
    return;
  }
  const Request& r = p.completion.request;
  if (!r.prompt_tokens.empty()) {
    p.tokens = r.prompt_tokens;  // a token-id prompt is routed by its own tokens
  } else {
    p.status = vocab->vocab->tokenize(r.prompt, p.tokens, r.parse_special);
  }
  if (p.status.ok()) p.blocks = chained_block_hashes(p.tokens, kBlockTokens);
}

void GatewayServer::prepared(HttpExchange* key, Prepared& p) {
  auto it = inflight_.find(key);
  if (it == inflight_.end() || it->second.preparing.get() != &p) return;
  if (p.cancelled) {  // the client went away meanwhile
    inflight_.erase(it);
    metrics_.abandoned_total++;
    return;
  }
  it->second.preparing.reset();
  const HttpExchangePtr ex = it->second.exchange;
  // Answered here, not carried: the entry goes first (the next pipelined request may follow).
  const auto answer = [&](unsigned status, std::string_view type, std::string_view body) {
    inflight_.erase(it);
    if (status >= 400) metrics_.bad_requests_total++;
    ex->reply(status, type, body);
  };
  const auto answer_error = [&](const Status& st) {
    inflight_.erase(it);
    ex->reply_error(st);
  };
  if (stopped_) return answer_error(Status(ErrorCode::kShuttingDown, "the gateway is stopping"));
  if (p.reply) return answer(p.reply->status, p.reply->content_type, p.reply->body);
  metrics_.requests_total++;
  if (p.relay != Relay::kNone) return relay(it->second, p);
  const http_route::Completion& c = p.completion;
  const bool other_api = !c.chat_body.empty();  // Anthropic's, Responses': re-encoded (gateway/reencode.h)
  if (!other_api && c.id_prefix != "chatcmpl-" && c.id_prefix != "cmpl-") {
    // llama-server's /completion: agents are spoken to in OpenAI's APIs, and its answer's shape
    // is not re-encoded here.
    metrics_.bad_requests_total++;
    return answer_error(Status(ErrorCode::kNotFound, "this endpoint is served by umad itself, not through uma-gw: "
                                                     "use /v1/chat/completions, /v1/completions, /v1/messages or /v1/responses"));
  }
  if (asks_for_gateway_fields(c.api.uma)) {
    metrics_.bad_requests_total++;
    return answer_error(Status(ErrorCode::kBadRequest, "'uma' is for the gateway's own use", "uma"));
  }
  if (!p.status.ok()) return answer_error(p.status);
  if (Status st = servable(c.api.model); !st.ok()) return answer_error(st);
  ProxyJob job;
  job.chat = c.api.chat;
  job.stream = c.api.stream;
  job.resumable = c.api.n == 1 && (c.api.tools.empty() || c.api.tool_choice == ToolChoice::kNone) && c.api.logprobs < 0;
  job.max_tokens = c.api.max_tokens;
  job.model = dispatch_name(c.api.model);
  job.body = std::move(p.body);
  if (other_api) {
    // The agent runs it as OpenAI chat, with usage in its stream (what the client's API reports).
    nlohmann::json body = nlohmann::json::parse(c.chat_body, nullptr, false);
    if (c.api.stream && body.is_object()) body["stream_options"] = {{"include_usage", true}};
    job.body = body.is_object() ? body.dump() : c.chat_body;
  }
  job.prompt_tokens = static_cast<std::int64_t>(p.tokens.size());
  // The agent runs the tokens computed here rather than tokenizing again (the same vocabulary and
  // template: its own), when they fit any agent's smallest body cap with the body.
  // Not with images: the agent puts their embeddings in their places of the text, and tokenizes it.
  if (config_.forward_tokens && c.request.images.empty() && c.api.prompts.size() <= 1 &&
      job.body.size() + 12 * p.tokens.size() < (std::size_t{1} << 20)) {
    job.prompt_ids = p.tokens;
  }
  job.blocks = std::move(p.blocks);
  const std::uint64_t id = next_request_++;
  job.completion_id = (job.chat ? "chatcmpl-" : "cmpl-") + id_prefix_ + std::to_string(id);
  job.created = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  if (other_api) {
    job.reencoder = std::make_shared<gateway::Reencoder>(c.api, c.writer, c.id_prefix + id_prefix_ + std::to_string(id), job.created);
  }
  job.received_at = p.received_at;
  it->second.proxy = std::make_unique<Proxy>(*this, ex, id, std::move(job));
  it->second.proxy->start();
}

// Whether a request for `model` can go to an agent (now, or once a loader has loaded it); else why not.
Status GatewayServer::servable(const std::string& model) {
  switch (agents_.lookup(model)) {
    case AgentDirectory::ModelLookup::kServed: break;
    case AgentDirectory::ModelLookup::kUnknown:
      return Status(ErrorCode::kNotFound, "The model '" + model + "' does not exist", "model");
    case AgentDirectory::ModelLookup::kCatalogOnly:
      if (loads_on_demand()) break;  // the proxy waits while it is loaded
      return Status(ErrorCode::kUnavailable, "The model '" + model + "' is in the catalog but no agent has it loaded", "model");
  }
  if (cold_loads_ != nullptr && agents_.in_catalog(model)) fan_out_.arrived(model, SteadyClock::now());
  return Status::Ok();
}

// The name a dispatch routes by: the one agents serve it as, a catalog model's own, or "" (any agent).
std::string GatewayServer::dispatch_name(const std::string& model) const {
  std::string name = agents_.served_name(model);
  if (name.empty() && agents_.lookup(model) == AgentDirectory::ModelLookup::kCatalogOnly) name = model;
  return name;
}

// Embeddings, reranking, /api/show, /infill, Ollama's generate with a suffix: sent as they came to an agent serving the model, its
// answer passed back; errors written here keep the client's API (Ollama's {"error"}, or OpenAI's).
void GatewayServer::relay(InFlight& entry, Prepared& p) {
  const HttpExchangePtr ex = entry.exchange;
  const bool ollama = p.relay == Relay::kOllama;
  Status st = p.status.ok() ? servable(p.relay_model) : p.status;
  if (!st.ok()) {
    if (!p.status.ok()) metrics_.bad_requests_total++;
    inflight_.erase(ex.get());
    if (!ollama) return ex->reply_error(st);
    return ex->reply(http_status(st.code()), "application/json", ollama_error_body(st));
  }
  ProxyJob job;
  job.model = dispatch_name(p.relay_model);
  job.body = std::move(p.body);
  job.relay_target = p.target;
  if (ollama) job.error_body = ollama_error_body;
  job.received_at = p.received_at;
  entry.proxy = std::make_unique<Proxy>(*this, ex, next_request_++, std::move(job));
  entry.proxy->start();
}

}  // namespace uma::gateway
