#include "http/http_server.h"

#include "http/embeddings.h"
#include "http/ollama_api.h"
#include "http/rerank.h"
#include "http/reply_writer.h"
#include "httpkit/access.h"
#include "httpkit/http_wire.h"
#include "net/tcp_listen.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <optional>

namespace uma {
namespace asio = boost::asio;
using tcp = asio::ip::tcp;

namespace {


// The scheduler names the prompt when it does not fit; a chat request's prompt is its messages.
Status error_for(const openai::CompletionRequest& r, const Status& st) {
  if (r.chat && st.param() == "prompt") return Status(st.code(), st.message(), "messages");
  return st;
}

// HTTP/1.1 + the OpenAI API as the serving layer's adapter: Beast's request parser fed the bytes
// as they arrive (it says "need more" on partial input), the router, and the reply encodings.
class HttpAdapter final : public ProtocolAdapter {
 public:
  explicit HttpAdapter(const HttpSite& site) : site_(site) {}

  void feed(std::string_view bytes) override { reader_.feed(bytes); }
  std::size_t buffered() const override { return reader_.buffered(); }
  std::size_t max_buffered() const override { return site_.config.max_header_bytes + site_.config.max_body_bytes; }

  std::optional<Input> next(bool busy) override {
    if (deferred_) {  // what the offloaded route made of the request read before
      const std::shared_ptr<Deferred> d = std::move(deferred_);
      return routed(std::move(d->routed));
    }
    if (busy) return std::nullopt;  // a pipelined request waits for the reply in flight
    HttpRequest req;
    Status error;
    bool header_too_large = false;
    switch (reader_.next(HttpLimits{site_.config.max_header_bytes, site_.config.max_body_bytes}, &req, &error,
                         &header_too_large)) {
      case RequestReader::Result::kNeedMore: return std::nullopt;
      case RequestReader::Result::kError: return parse_error(error, header_too_large);
      case RequestReader::Result::kRequest: break;
    }
    keep_alive_ = req.keep_alive;
    return route(std::move(req));
  }

  void started(RequestId id, std::string& out) override {
    (void)out;  // a stream's head goes out with its first event: an error before it is an HTTP error
    // A stream a gateway resumes here keeps the id and time it began with elsewhere.
    std::string reply_id = !req_.uma.id.empty() ? req_.uma.id : id_prefix_ + std::to_string(id);
    const std::int64_t created = req_.uma.created > 0 ? req_.uma.created
                                 : std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
    writer_ = make_writer_ ? make_writer_(req_, std::move(reply_id), created) : nullptr;
    first_id_ = id;
    choices_.clear();
    choices_.resize(static_cast<std::size_t>(req_.n) * std::max<std::size_t>(1, req_.prompts.size()));
    if (tool_parser_) {
      for (std::size_t i = 1; i < choices_.size(); ++i) choices_[i].parser = tool_parser_->fresh();
      choices_[0].parser = std::move(tool_parser_);
    }
    running_ = static_cast<std::int32_t>(choices_.size());
    usage_ = {};
    error_.reset();
    headers_sent_ = false;
  }

  // A stream's head, once its first event is not an error, and what opens the stream.
  void start_stream(std::string& out) {
    if (headers_sent_ || !req_.stream || error_) return;
    headers_sent_ = true;
    out += event_stream_head(keep_alive_, extra_headers(), writer_->stream_content_type());
    writer_->open(choices_.size(), out);
  }

  // Headers every answer to the request carries: the fields it sent that umad ignored.
  std::string extra_headers() const {
    std::string h = cors_;
    if (req_.ignored_fields.empty()) return h;
    std::string names;
    for (const std::string& f : req_.ignored_fields) {
      if (!names.empty()) names += ", ";
      for (char ch : f.substr(0, 64)) names += std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '-' || ch == '.' ? ch : '?';
    }
    return h + "X-Uma-Ignored-Fields: " + names + "\r\n";
  }

  // Streamed: each piece as the writer shapes it; the logprobs of the tokens whose text it
  // released go with the first (text held back keeps them until then).
  void send(std::size_t index, const std::vector<ChatDelta>& deltas, std::string& out) {
    ChoiceState& ch = choices_[index];
    if (!req_.stream || error_) return;
    for (const ChatDelta& d : deltas) {
      writer_->delta(index, d, ch.logprobs, ch.sent_bytes, out);
      ch.sent_bytes += d.content.size();
      ch.logprobs.clear();
    }
  }

  Answer refused(const Status& why) override { return error_answer(why); }

  // Each choice (ev.request_id - first_id_) streams its own pieces; the reply ends when the last
  // choice has: the stream's close, or the one whole answer with every choice.
  void encode(const Event& ev, std::string& out) override {
    if (req_.embedding) return encode_embeddings(ev, out);
    const openai::CompletionRequest& r = req_;
    const std::size_t index = static_cast<std::size_t>(ev.request_id - first_id_);
    ChoiceState& ch = choices_.at(index);
    if (ev.kind == Event::Kind::kProgress) {  // asked for only on a stream
      if (!r.stream || index != 0 || !writer_) return;
      start_stream(out);
      writer_->progress({ev.prompt_tokens, ev.cached_tokens, ev.prompt_processed, std::max(0.0, ev.total_ms - ev.queue_ms)}, out);
      return;
    }
    if (!headers_sent_ && ev.kind == Event::Kind::kToken && ev.prompt_tokens > 0 && writer_) {
      const auto resumed = static_cast<std::int32_t>(r.uma.resume.size());
      writer_->prompt_known(ev.prompt_tokens - resumed, std::min(ev.cached_tokens, ev.prompt_tokens - resumed));
    }
    if (ev.kind != Event::Kind::kError) start_stream(out);
    switch (ev.kind) {
      case Event::Kind::kToken:
        ch.logprobs.insert(ch.logprobs.end(), ev.logprobs.begin(), ev.logprobs.end());
        if (ch.parser) {
          send(index, ch.parser->feed(ev.text, false), out);
        } else if (!r.stream) {
          ch.text += ev.text;
        } else {
          send(index, {ChatDelta{ev.text, -1, {}, {}, {}, {}}}, out);
        }
        return;
      case Event::Kind::kDone:
        ch.logprobs.insert(ch.logprobs.end(), ev.logprobs.begin(), ev.logprobs.end());
        {
          // Each prompt counted once (its n choices share it); resumed tokens were the
          // completion's, generated elsewhere.
          const auto resumed = static_cast<std::int32_t>(r.uma.resume.size());
          if (index % static_cast<std::size_t>(r.n) == 0) {
            usage_.prompt_tokens += ev.prompt_tokens - resumed;
            usage_.cached_tokens += std::min(ev.cached_tokens, ev.prompt_tokens - resumed);
          }
          if (index == 0 && ev.ttft_ms >= 0) {
            usage_.prompt_ms = std::max(0.0, ev.ttft_ms - ev.queue_ms);
            usage_.predicted_ms = std::max(0.0, ev.total_ms - ev.ttft_ms);
          }
          usage_.completion_tokens += ev.completion_tokens + resumed;
          usage_.prediction = !r.prediction.empty();
          usage_.accepted_prediction_tokens += ev.accepted_prediction_tokens;
          usage_.rejected_prediction_tokens += ev.rejected_prediction_tokens;
        }
        ch.reason = ev.reason == FinishReason::kLength ? "length" : "stop";
        ch.stop_word = ev.stop_word;
        if (ch.parser) {
          send(index, ch.parser->feed("", true), out);
          // OpenAI's finish reason for a reply that called tools (unless it was cut short).
          if (ev.reason != FinishReason::kLength && !ch.parser->tool_calls().empty()) ch.reason = "tool_calls";
        }
        if (headers_sent_ && !error_) {
          writer_->finish(index, {ch.reason, ch.stop_word}, ch.logprobs, ch.sent_bytes, out);
          ch.logprobs.clear();
        }
        break;
      case Event::Kind::kError:
        if (!error_ && headers_sent_) writer_->fail(error_for(r, ev.error), out);  // mid-stream
        if (!error_) error_ = ev.error;
        break;
      case Event::Kind::kProgress:
        return;  // answered above
    }
    if (--running_ > 0) return;
    if (headers_sent_) {
      if (!error_) writer_->close(usage_, out);
      out += kLastChunk;
    } else if (error_) {
      const Status st = error_for(r, *error_);
      out += respond(http_status(st.code()), "application/json", writer_->error_body(st));
    } else {
      std::vector<WholeChoice> all;
      for (const ChoiceState& c : choices_) {
        all.push_back(c.parser ? WholeChoice{c.parser->content(), c.parser->reasoning(), {c.reason, c.stop_word},
                                             c.logprobs, c.parser->tool_calls()}
                               : WholeChoice{c.text, {}, {c.reason, c.stop_word}, c.logprobs, {}});
      }
      out += respond(200, "application/json", writer_->whole(all, usage_));
    }
    headers_sent_ = false;  // the reply is whole
  }

  // An embeddings request ends with its one event: the vectors, or an error.
  void encode_embeddings(const Event& ev, std::string& out) {
    if (ev.kind == Event::Kind::kToken || ev.kind == Event::Kind::kProgress) return;
    if (ev.kind == Event::Kind::kError) {
      out += respond(http_status(ev.error.code()), "application/json", http_error_body(ev.error));
    } else if (ev.reason != FinishReason::kCancelled) {
      const openai::EmbeddingShape shape = req_.embedding_shape;
      const auto& rr = req_.rerank;
      out += respond(200, "application/json",
                     shape == openai::EmbeddingShape::kRerank
                         ? rerank::response({req_.model, {}, rr.documents, rr.top_n, rr.tei, rr.return_text}, ev.embeddings, ev.prompt_tokens)
                     : shape == openai::EmbeddingShape::kOpenAi
                         ? embeddings::response(req_.model, ev.embeddings, req_.embedding_base64, ev.prompt_tokens)
                         : ollama_embeddings_response(req_.model, ev.embeddings, ev.prompt_tokens,
                                                      shape == openai::EmbeddingShape::kOllamaLegacy));
    }
    running_ = 0;
  }

  bool keep_alive() const override { return keep_alive_; }

  std::string internal_error() override {
    keep_alive_ = false;
    if (headers_sent_) return {};  // mid-stream: the stream just ends
    return respond(http_status(ErrorCode::kInternal), "application/json",
                   http_error_body(ErrorCode::kInternal, "internal error"));
  }

 private:
  Answer parse_error(const Status& error, bool header_too_large) {
    keep_alive_ = false;
    if (header_too_large) return Answer{respond(431, "application/json", http_error_body(error)), error.code(), true};
    return error_answer(error);
  }

  Input route(HttpRequest req) {
    req_.ignored_fields.clear();  // a previous request's: never named on this one's answer
    const AccessCheck access = check_access(site_.access, req);
    cors_ = access.cors;
    switch (access.verdict) {
      case AccessCheck::Verdict::kPreflight: return Answer{respond(204, "text/plain", ""), ErrorCode::kOk, !keep_alive_};
      case AccessCheck::Verdict::kUnauthorized: return error_answer(Status(ErrorCode::kUnauthorized, std::string(kKeyRequired)));
      case AccessCheck::Verdict::kPass: break;
    }
    http_route::Context ctx;
    ctx.ready = site_.ready;
    ctx.shutting_down = site_.shutting_down;
    ctx.model_id = site_.model_id;
    ctx.chat_template = &site_.chat_template;
    ctx.limits = &site_.config.limits;
    ctx.default_sampling = &site_.config.default_sampling;
    ctx.schema_to_grammar = &site_.config.schema_to_grammar;
    ctx.metrics = &site_.metrics;
    ctx.tokenize = &site_.tokenize;
    ctx.token_text = &site_.token_text;
    ctx.count_with_images = &site_.count_with_images;
    ctx.facts = &site_.facts;
    ctx.slots_endpoint = site_.config.slots_endpoint;
    ctx.metrics_endpoint = site_.config.metrics_endpoint;
    ctx.webui = site_.config.webui;
    if (req.body.size() < site_.config.offload_body_bytes) return routed(http_route::route(req.method, req.target, req.body, ctx));
    // A large body: parsed, checked and rendered off the I/O thread, which meanwhile writes every
    // other stream's tokens. The job owns its copy of everything; the site outlives it.
    auto d = std::make_shared<Deferred>();
    d->method = req.method;
    d->target = std::move(req.target);
    d->body = std::move(req.body);
    d->ctx = ctx;
    deferred_ = d;
    return Defer{[d] {
      try {
        d->routed = http_route::route(d->method, d->target, d->body, d->ctx);
      } catch (const std::exception&) {  // route() does not throw; a renderer might
        d->routed.action = http_route::error_reply(ErrorCode::kInternal, "internal error");
      }
    }};
  }

  // A routed request: an answer, or a completion to start.
  Input routed(http_route::Routed routed) {
    if (routed.completion_endpoint) site_.metrics.requests_total++;
    if (auto* reply = std::get_if<http_route::Reply>(&routed.action)) {
      return Answer{respond(reply->status, reply->content_type, reply->body), reply->error, !keep_alive_};
    }
    http_route::Completion& completion = std::get<http_route::Completion>(routed.action);
    req_ = std::move(completion.api);
    make_writer_ = std::move(completion.writer);
    id_prefix_ = std::move(completion.id_prefix);
    tool_parser_ = std::move(completion.tool_parser);
    site_.metrics.ignored_fields_total += req_.ignored_fields.size();
    if (!req_.uma.prompt_tokens.empty()) site_.metrics.gateway_tokens_total++;
    const auto choices = static_cast<std::int32_t>(req_.n * std::max<std::size_t>(1, req_.prompts.size()));
    return Start{std::move(completion.request), choices, req_.prompts.size() > 1 ? req_.prompts : std::vector<PromptInput>{}};
  }

  Answer error_answer(const Status& st) {
    return Answer{respond(http_status(st.code()), "application/json", http_error_body(st)), st.code(),
                  !keep_alive_};
  }

  std::string respond(unsigned status, std::string_view content_type, std::string_view body) const {
    return http_reply(status, content_type, body, keep_alive_, extra_headers());
  }

  // A request whose routing runs off the I/O thread, and what it made of it.
  struct Deferred {
    boost::beast::http::verb method;
    std::string target;
    std::string body;
    http_route::Context ctx;
    http_route::Routed routed;
  };

  const HttpSite& site_;
  RequestReader reader_;
  std::shared_ptr<Deferred> deferred_;  // from Defer until the next next()
  bool keep_alive_ = true;
  // The completion in flight.
  openai::CompletionRequest req_;
  std::unique_ptr<ChatOutputParser> tool_parser_;  // tools the model may call: null otherwise
  // One per choice of the completion in flight.
  struct ChoiceState {
    std::string text;                     // not streamed: its text, for the one response
    std::vector<LogprobEntry> logprobs;   // entries not yet sent (streamed) / all (not streamed)
    std::size_t sent_bytes = 0;           // streamed: completion text sent so far (text_offset)
    std::string reason;                   // its finish_reason, once done
    std::string stop_word;                // the stop string that ended it
    std::unique_ptr<ChatOutputParser> parser;
  };
  std::vector<ChoiceState> choices_;
  RequestId first_id_ = 0;
  std::int32_t running_ = 0;              // choices whose last event has not come
  openai::Usage usage_;
  std::optional<Status> error_;           // the first choice that failed: the reply is that error
  std::unique_ptr<ReplyWriter> writer_;
  http_route::WriterFactory make_writer_;
  std::string id_prefix_;  // the reply's id before its number (chatcmpl-, msg_, resp_, ...)
  std::string cors_;       // the CORS headers the request's answers carry
  bool headers_sent_ = false;
};

}  // namespace

struct HttpServer::Listener {
  Listener(asio::io_context& io, StreamServer& serving, ServerMetrics& metrics)
      : acceptor(io),
        loop(io, acceptor, "http",
             [&serving](tcp::socket s) {
               // Tokens are small writes that must leave at once: no Nagle delay. A fixed send
               // buffer keeps what a slow reader has not taken here, under --max-tx-kib, not
               // in an autotuned kernel buffer.
               boost::system::error_code ignored;
               s.set_option(tcp::no_delay(true), ignored);
               s.set_option(asio::socket_base::send_buffer_size(64 * 1024), ignored);
               serving.adopt(FrontEnd::kHttp, std::move(s));
             },
             &metrics.accept_pauses_total) {}
  tcp::acceptor acceptor;
  AcceptLoop<tcp::acceptor> loop;
};

HttpServer::HttpServer(asio::io_context& io, HttpConfig config, ServerMetrics& metrics, StreamServer& serving)
    : io_(io), serving_(serving), site_(std::move(config), metrics) {
  serving.add_front_end(front_end_config(FrontEnd::kHttp, site_.config.max_connections, site_.config.max_tx_bytes,
                                         site_.config.timeout_sec, metrics),
                        [this] { return std::make_unique<HttpAdapter>(site_); });
}

HttpServer::~HttpServer() = default;

Status parse_http_hosts(const std::string& hosts, int port, HttpConfig* out) {
  std::vector<std::string> list;
  for (std::size_t at = 0; at <= hosts.size() && !hosts.empty();) {
    std::size_t end = hosts.find(',', at);
    if (end == std::string::npos) end = hosts.size();
    std::string h = hosts.substr(at, end - at);
    h.erase(0, h.find_first_not_of(' '));
    h.erase(h.find_last_not_of(' ') + 1);
    if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
    at = end + 1;
    if (h.empty()) continue;  // "a,,b" and a trailing comma, as llama-server reads them
    if (h.ends_with(".sock")) {
      return {ErrorCode::kInvalidArgument, "--host " + h + ": HTTP on a Unix socket is not served (--socket is umad's own protocol)"};
    }
    boost::system::error_code ec;
    asio::ip::make_address(h, ec);
    if (ec) return {ErrorCode::kInvalidArgument, "--host: '" + h + "' is not an IP address"};
    list.push_back(std::move(h));
  }
  if (!hosts.empty() && list.empty()) return {ErrorCode::kInvalidArgument, "--host wants at least one address"};
  if (!list.empty()) {
    out->host = list.front();
    out->more_hosts.assign(list.begin() + 1, list.end());
  }
  if (port >= 0) out->port = static_cast<std::uint16_t>(port);
  return {};
}

Status HttpServer::listen_on(const std::string& host, std::uint16_t port, bool v6_only) {
  auto l = std::make_unique<Listener>(io_, serving_, site_.metrics);
  if (Status st = listen_tcp(l->acceptor, host, port, "--http", v6_only); !st.ok()) return st;
  listeners_.push_back(std::move(l));
  return {};
}

Status HttpServer::listen() {
  const bool several = !site_.config.more_hosts.empty();
  if (Status st = listen_on(site_.config.host, site_.config.port, several); !st.ok()) return st;
  for (const std::string& host : site_.config.more_hosts) {
    if (Status st = listen_on(host, port(), several); !st.ok()) return st;
  }
  return {};
}

std::uint16_t HttpServer::port() const { return listeners_.empty() ? 0 : bound_port(listeners_.front()->acceptor); }

void HttpServer::start() {
  for (auto& l : listeners_) l->loop.start();
}

void HttpServer::set_ready(std::string model_id, ChatTemplate chat_template) {
  site_.model_id = std::move(model_id);
  site_.chat_template = std::move(chat_template);
  site_.ready = true;
}

void HttpServer::set_request_limits(std::size_t max_prompt_bytes, std::size_t max_body_bytes) {
  site_.config.limits.max_prompt_bytes = max_prompt_bytes;
  site_.config.max_body_bytes = max_body_bytes;
}

void HttpServer::set_vocabulary(http_route::Tokenize tokenize, http_route::TokenText token_text, http_route::ModelFacts facts,
                                http_route::CountWithImages count_with_images) {
  site_.tokenize = std::move(tokenize);
  site_.count_with_images = std::move(count_with_images);
  site_.token_text = std::move(token_text);
  site_.facts = std::move(facts);
}

void HttpServer::stop_accepting() {
  site_.shutting_down = true;
  for (auto& l : listeners_) {
    l->loop.stop();
    boost::system::error_code ignored;
    l->acceptor.close(ignored);
  }
}

}  // namespace uma
