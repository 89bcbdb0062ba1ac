#include "gateway/gateway_server.h"

#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <random>
#include <set>

#include "common/json_text.h"
#include "http/api_key.h"
#include "http/cors.h"
#include "net/tcp_listen.h"
#include "serve/block_hash.h"

namespace uma::gateway {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;

namespace {

std::string random_prefix() {
  std::random_device rd;
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08x", rd());
  return buf;
}

// A request the gateway only forwards may not carry what umad takes from a gateway.
bool asks_for_gateway_fields(const openai::GatewayOptions& g) {
  return g.token_ids || !g.resume.empty() || !g.id.empty() || g.created != 0;
}

}  // namespace

struct GatewayServer::Prepared {
  std::atomic<bool> cancelled{false};  // set on the I/O thread when its client goes
  http::verb method = http::verb::post;
  std::string target;
  std::string body;
  std::optional<http_route::Reply> reply;  // answered by the gateway itself (a bad request, 404, ...)
  http_route::Completion completion;
  bool keep_alive = false;
  SteadyClock::time_point received_at{};
  Status status;  // the vocabulary's or the tokenizer's
  std::vector<Token> tokens;
  std::vector<std::uint64_t> blocks;
};

GatewayServer::GatewayServer(asio::io_context& io, GatewayConfig config, AgentDirectory& agents, VocabCache& vocabs,
                             SchemaToGrammar schema_to_grammar, ColdLoads* cold_loads)
    : io_(io), config_(std::move(config)), agents_(agents), vocabs_(vocabs),
      schema_to_grammar_(std::move(schema_to_grammar)), acceptor_(io),
      accept_loop_(io, acceptor_, "gateway", [this](tcp::socket s) { adopt(std::move(s)); }), sweep_timer_(io),
      tokenizers_(static_cast<std::size_t>(std::max(1, config_.tokenize_threads))), id_prefix_(random_prefix()),
      waiting_(static_cast<std::size_t>(std::max(0, config_.max_queue))), fan_out_(config_.fan_out) {
  cold_loads_ = cold_loads;
  if (cold_loads_ != nullptr) {
    cold_loads_->set_migration(
        [this](const std::string& model, const std::string& loader) {
          return agents_.serving(model, cluster::loaded_model_agent_id(loader, model)) > 0;
        },
        [this](const std::string& loader, const std::vector<std::string>& models) {
          for (const std::string& m : models) move_streams(cluster::loaded_model_agent_id(loader, m), "room for a load on " + loader);
        });
  }
}

GatewayServer::~GatewayServer() {
  if (cold_loads_ != nullptr) cold_loads_->set_migration(nullptr, nullptr);
  stop();
  tokenizers_.stop();  // what is queued there is dropped, not tokenized
  tokenizers_.join();  // nothing of ours runs on them past here
}

Status GatewayServer::listen() { return listen_tcp(acceptor_, config_.host, config_.port, "--listen"); }

std::uint16_t GatewayServer::port() const { return bound_port(acceptor_); }

void GatewayServer::start() {
  stopped_ = false;
  accept_loop_.start();
  sweep();
}

void GatewayServer::stop() {
  if (stopped_) return;
  stopped_ = true;
  accept_loop_.stop();
  sweep_timer_.cancel();
  boost::system::error_code ignored;
  acceptor_.close(ignored);
  std::vector<ConnectionPtr> open;
  for (auto& [id, cl] : clients_) open.push_back(cl.conn);
  for (const ConnectionPtr& c : open) c->close("gateway stopping");
}

void GatewayServer::adopt(tcp::socket s) {
  boost::system::error_code ignored;
  // A client gone while its prompt was tokenized still holds its request until a tokenizer thread
  // reaches it: it counts against the cap as an open connection would.
  if (stopped_ || clients_.size() + orphans_ >= static_cast<std::size_t>(config_.max_connections)) {
    s.close(ignored);
    return;
  }
  s.set_option(tcp::no_delay(true), ignored);
  ConnectionOptions options;
  options.log_name = "gw";
  options.max_tx_bytes = config_.max_tx_bytes;
  options.eof_closes = true;
  ConnectionOwner& owner = *this;
  auto c = std::make_shared<Connection>(StreamSocket(std::move(s)), next_conn_++, options, owner);
  clients_[c->id()].conn = c;
  c->start_reading();
}

bool GatewayServer::input_full(const Connection& c) const {
  auto it = clients_.find(c.id());
  return it != clients_.end() && it->second.in.size() > config_.max_header_bytes + config_.max_body_bytes;
}

void GatewayServer::on_input(const ConnectionPtr& c, std::string_view bytes) {
  auto it = clients_.find(c->id());
  if (it == clients_.end()) return;
  it->second.in.append(bytes);
  serve(it->second);
}

void GatewayServer::on_close(const ConnectionPtr& c) {
  auto it = clients_.find(c->id());
  if (it == clients_.end()) return;
  if (it->second.preparing) {
    it->second.preparing->cancelled = true;  // its tokenizer thread skips it
    orphans_++;
  }
  if (it->second.proxy) {
    it->second.proxy->client_gone();
    retire(std::move(it->second.proxy));
  }
  clients_.erase(it);
}

void GatewayServer::on_failure(const ConnectionPtr& c, const char* what) {
  spdlog::error("gw {}: {}", c->id(), what);
  c->close("failure");
}

void GatewayServer::retire(std::unique_ptr<Proxy> p) {
  // Never freed inside its own callback: the loop frees it once the current handler returns.
  asio::post(io_, [p = std::shared_ptr<Proxy>(std::move(p))] {});
}

void GatewayServer::serve(Client& cl) {
  if (cl.proxy || cl.preparing || cl.conn->closed() || cl.conn->state() == ConnState::kClosing) return;
  if (cl.in.empty()) return;
  if (!cl.parser) {
    cl.parser.emplace();
    cl.parser->eager(true);
    cl.parser->body_limit(config_.max_body_bytes);
    cl.parser->header_limit(static_cast<std::uint32_t>(config_.max_header_bytes));
  }
  beast::error_code ec;
  while (!cl.in.empty() && !cl.parser->is_done()) {
    const std::size_t used = cl.parser->put(asio::buffer(cl.in.data(), cl.in.size()), ec);
    cl.in.erase(0, used);
    if (ec == http::error::need_more) ec = {};
    if (ec || used == 0) break;
  }
  if (ec) {
    metrics_.bad_requests_total++;
    const bool too_big = ec == http::error::body_limit;
    return answer_error(cl, Status(too_big ? ErrorCode::kPromptTooLarge : ErrorCode::kBadRequest,
                                   too_big ? "request body over the limit" : "malformed HTTP request: " + ec.message()),
                        false);
  }
  if (!cl.parser->is_done()) return;
  http::request<http::string_body> req = cl.parser->release();
  cl.parser.reset();
  handle(cl, req);
}

void GatewayServer::answer(Client& cl, unsigned status, std::string_view content_type, std::string_view body,
                           bool keep_alive) {
  std::string out = "HTTP/1.1 " + std::to_string(status) + " " +
                    std::string(http::obsolete_reason(static_cast<http::status>(status))) + "\r\nContent-Type: " +
                    std::string(content_type) + "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n" +
                    cl.cors + "Connection: " + (keep_alive ? "keep-alive" : "close") + "\r\n\r\n";
  out.append(body);
  const ConnectionPtr c = cl.conn;
  c->send(out);
  if (!keep_alive) return c->close_when_flushed();
  serve(cl);  // a pipelined request
}

void GatewayServer::answer_error(Client& cl, const Status& st, bool keep_alive) {
  answer(cl, openai::http_status(st.code()), "application/json", openai::error_body(st), keep_alive);
}

void GatewayServer::handle(Client& cl, http::request<http::string_body>& req) {
  const auto received_at = SteadyClock::now();
  std::string_view target = req.target();
  target = target.substr(0, target.find('?'));
  const bool keep_alive = req.keep_alive();
  const auto origin = req.find(http::field::origin);
  cl.cors = cors_headers(config_.cors_origin, origin != req.end() ? std::string_view(origin->value()) : std::string_view());
  if (req.method() == http::verb::options && !config_.cors_origin.empty()) return answer(cl, 204, "text/plain", "", keep_alive);
  if (!config_.api_key.empty() && !(req.method() == http::verb::get && target == "/health")) {
    const auto auth = req.find(http::field::authorization);
    const auto x_key = req.find("x-api-key");
    const std::string_view a = auth != req.end() ? std::string_view(auth->value()) : std::string_view();
    const std::string_view x = x_key != req.end() ? std::string_view(x_key->value()) : std::string_view();
    if (!client_authorized(auth != req.end() ? &a : nullptr, x_key != req.end() ? &x : nullptr, config_.api_key)) {
      metrics_.bad_requests_total++;
      return answer_error(cl, Status(ErrorCode::kUnauthorized, "a valid key is required: Authorization: Bearer KEY (or x-api-key: KEY)"),
                          keep_alive);
    }
  }
  if (req.method() == http::verb::get && target == "/health") {
    const std::size_t live = agents_.live();
    const std::string body = "{\"status\":\"" + std::string(live > 0 ? "ok" : "no agents") +
                             "\",\"agents\":" + std::to_string(agents_.size()) + ",\"live\":" + std::to_string(live) + "}";
    return answer(cl, live > 0 ? 200 : 503, "application/json", body, keep_alive);
  }
  if (req.method() == http::verb::get && target == "/metrics") {
    return answer(cl, 200, "text/plain; version=0.0.4", metrics_text(), keep_alive);
  }
  if (req.method() == http::verb::get && target == "/v1/models") {
    nlohmann::ordered_json data = nlohmann::ordered_json::array();
    std::set<std::string> ids;
    for (const std::string& m : agents_.models()) ids.insert(m);
    for (const std::string& m : agents_.catalog()) ids.insert(m);
    for (const std::string& m : ids) data.push_back({{"id", m}, {"object", "model"}, {"owned_by", "uma"}});
    return answer(cl, 200, "application/json", to_json_text(nlohmann::ordered_json{{"object", "list"}, {"data", data}}),
                  keep_alive);
  }
  if (req.method() != http::verb::post) {  // nothing to parse or tokenize: a 404 or 405
    const http_route::Routed routed = http_route::route(req.method(), req.target(), req.body(), route_context(nullptr));
    const auto& reply = std::get<http_route::Reply>(routed.action);
    if (reply.status >= 400) metrics_.bad_requests_total++;
    return answer(cl, reply.status, reply.content_type, reply.body, keep_alive);
  }
  // Parsing, rendering and tokenizing off the I/O thread (see the header); the connection serves
  // nothing more meanwhile (what comes in is kept, and a hang-up is seen).
  auto p = std::make_shared<Prepared>();
  p->method = req.method();
  p->target = std::string(req.target());
  p->body = std::move(req.body());
  p->keep_alive = keep_alive;
  p->received_at = received_at;
  cl.preparing = p;
  cl.conn->set_state(ConnState::kBusy);
  asio::post(tokenizers_, [this, conn_id = cl.conn->id(), p]() mutable {
    if (!p->cancelled) prepare(*p);
    // Back on the I/O thread, which also drops the last reference there.
    asio::post(io_, [this, conn_id, p = std::move(p)] { prepared(conn_id, *p); });
  });
}

http_route::Context GatewayServer::route_context(const ChatTemplate* chat_template) const {
  http_route::Context ctx;
  ctx.ready = true;
  ctx.model_id = "uma-gw";
  ctx.chat_template = chat_template;
  ctx.limits = &config_.limits;
  ctx.default_sampling = &config_.default_sampling;
  ctx.schema_to_grammar = &schema_to_grammar_;
  return ctx;
}

// On a tokenizer thread: the request checked as umad checks it, rendered with its model's template
// and tokenized with its vocabulary (a vocabulary not yet resident is loaded here: gateway/vocab_cache.h).
void GatewayServer::prepare(Prepared& p) {
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

void GatewayServer::prepared(std::uint64_t conn_id, Prepared& p) {
  if (p.cancelled) {  // the client went away meanwhile
    orphans_--;
    metrics_.abandoned_total++;
    return;
  }
  auto it = clients_.find(conn_id);
  if (stopped_ || it == clients_.end() || it->second.preparing.get() != &p || it->second.conn->state() != ConnState::kBusy) {
    return;
  }
  Client& cl = it->second;
  cl.preparing.reset();
  if (p.reply) {
    cl.conn->set_state(ConnState::kIdle);  // answered here: the next pipelined request may follow
    if (p.reply->status >= 400) metrics_.bad_requests_total++;
    return answer(cl, p.reply->status, p.reply->content_type, p.reply->body, p.keep_alive);
  }
  metrics_.requests_total++;
  const http_route::Completion& c = p.completion;
  const bool other_api = !c.chat_body.empty();  // Anthropic's, Responses': re-encoded (gateway/reencode.h)
  if (!other_api && c.id_prefix != "chatcmpl-" && c.id_prefix != "cmpl-") {
    // llama-server's /completion: agents are spoken to in OpenAI's APIs, and its answer's shape
    // is not re-encoded here.
    metrics_.bad_requests_total++;
    cl.conn->set_state(ConnState::kIdle);
    return answer_error(cl, Status(ErrorCode::kNotFound, "this endpoint is served by umad itself, not through uma-gw: "
                                                         "use /v1/chat/completions, /v1/completions, /v1/messages or /v1/responses"),
                        p.keep_alive);
  }
  if (asks_for_gateway_fields(c.api.uma)) {
    metrics_.bad_requests_total++;
    cl.conn->set_state(ConnState::kIdle);
    return answer_error(cl, Status(ErrorCode::kBadRequest, "'uma' is for the gateway's own use", "uma"), p.keep_alive);
  }
  if (!p.status.ok()) {
    cl.conn->set_state(ConnState::kIdle);
    return answer_error(cl, p.status, p.keep_alive);
  }
  switch (agents_.lookup(c.api.model)) {
    case AgentDirectory::ModelLookup::kServed: break;
    case AgentDirectory::ModelLookup::kUnknown:
      cl.conn->set_state(ConnState::kIdle);
      return answer_error(cl, Status(ErrorCode::kNotFound, "The model '" + c.api.model + "' does not exist", "model"), p.keep_alive);
    case AgentDirectory::ModelLookup::kCatalogOnly:
      if (loads_on_demand()) break;  // the proxy waits while it is loaded
      cl.conn->set_state(ConnState::kIdle);
      return answer_error(cl, Status(ErrorCode::kUnavailable, "The model '" + c.api.model + "' is in the catalog but no agent has it loaded", "model"),
                          p.keep_alive);
  }
  if (cold_loads_ != nullptr && agents_.in_catalog(c.api.model)) fan_out_.arrived(c.api.model, SteadyClock::now());
  ProxyJob job;
  job.chat = c.api.chat;
  job.stream = c.api.stream;
  job.resumable = c.api.n == 1 && (c.api.tools.empty() || c.api.tool_choice == ToolChoice::kNone) && c.api.logprobs < 0;
  job.max_tokens = c.api.max_tokens;
  job.model = agents_.served_name(c.api.model);
  if (job.model.empty() && agents_.lookup(c.api.model) == AgentDirectory::ModelLookup::kCatalogOnly) job.model = c.api.model;
  job.body = std::move(p.body);
  if (other_api) {
    // The agent runs it as OpenAI chat, with usage in its stream (what the client's API reports).
    nlohmann::json body = nlohmann::json::parse(c.chat_body, nullptr, false);
    if (c.api.stream && body.is_object()) body["stream_options"] = {{"include_usage", true}};
    job.body = body.is_object() ? body.dump() : c.chat_body;
  }
  job.prompt_tokens = static_cast<std::int64_t>(p.tokens.size());
  job.blocks = std::move(p.blocks);
  const std::uint64_t id = next_request_++;
  job.completion_id = (job.chat ? "chatcmpl-" : "cmpl-") + id_prefix_ + std::to_string(id);
  job.created = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  if (other_api) {
    job.reencoder = std::make_shared<gateway::Reencoder>(c.api, c.writer, c.id_prefix + id_prefix_ + std::to_string(id), job.created);
  }
  job.keep_alive = p.keep_alive;
  job.received_at = p.received_at;
  job.extra_headers = cl.cors;
  cl.proxy = std::make_unique<Proxy>(*this, cl.conn, id, std::move(job));
  cl.proxy->start();
}

}  // namespace uma::gateway
