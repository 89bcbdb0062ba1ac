// libFuzzer target: everything an HTTP client controls. Raw bytes go through httpkit's RequestReader
// (the one every server here reads with) with the server's limits (the first input byte picks how
// the rest is split into reads, so partial request lines, headers and bodies and several
// pipelined requests per read are explored), and through its ResponseReader and SseSplitter (what
// the gateway reads from an agent and every client here from a server),
// then routing (http/http_router.h), openai::parse_request and chat rendering (a fake renderer),
// then the encoding of whatever the answer is. Nothing may throw, crash or trip a sanitizer, and
// every JSON body we would send must parse as JSON whatever bytes the request held.
#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>

#include "http/embeddings.h"
#include "http/http_router.h"
#include "http/http_server.h"
#include "httpkit/http_wire.h"

namespace {

void must_be_json(const std::string& text) {
  if (nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false).is_discarded()) std::abort();
}

// Encodes every answer a completion can produce, with text that is not valid UTF-8 on purpose.
void encode_completion(const uma::openai::CompletionRequest& api) {
  const std::string text = "tok\xe2\x82";
  must_be_json(uma::openai::chunk(api, "cmpl-1", 1, text, "", true));
  must_be_json(uma::openai::chunk(api, "cmpl-1", 1, "", "stop", false));
  must_be_json(uma::openai::usage_chunk(api, "cmpl-1", 1, {3, 4}));
  must_be_json(uma::openai::response(api, "cmpl-1", 1, text, "length", {3, 4}));
}

struct Harness {
  uma::HttpConfig config;
  uma::ServerMetrics metrics;
  uma::http_route::ChatTemplate chat = [](const uma::ChatRequest& r, uma::ChatPrompt* out) {
    for (const auto& m : r.turns) {
      if (m.role == "tool") return uma::Status(uma::ErrorCode::kBadRequest, "unsupported role " + m.role);
      out->text += "<|" + m.role + "|>" + m.content;
    }
    return uma::Status::Ok();
  };
  // A byte tokenizer: each byte a token (what /tokenize and count_tokens run on here).
  uma::http_route::Tokenize tokenize = [](std::string_view text, bool, bool, std::vector<std::int32_t>* out) {
    for (unsigned char ch : text) out->push_back(ch);
    return uma::Status::Ok();
  };
  uma::http_route::TokenText token_text = [](std::int32_t t) { return std::string(1, static_cast<char>(t)); };
  uma::http_route::ModelFacts facts{1024, 512, 4096, 256, 8, 1000, 2000, 4, "m.gguf", "chatml", 1};
  Harness() {
    config.limits.max_prompt_bytes = 4096;
    config.max_body_bytes = 16 * 1024;
  }
  void serve(const uma::HttpRequest& req, bool ready) {
    uma::http_route::Context ctx;
    ctx.ready = ready;
    ctx.model_id = "m.gguf";
    ctx.chat_template = &chat;
    ctx.limits = &config.limits;
    ctx.default_sampling = &config.default_sampling;
    ctx.metrics = &metrics;
    ctx.tokenize = &tokenize;
    ctx.token_text = &token_text;
    ctx.facts = &facts;
    const uma::http_route::Routed r = uma::http_route::route(req.method, req.target, req.body, ctx);
    if (const auto* reply = std::get_if<uma::http_route::Reply>(&r.action)) {
      if (reply->content_type == "application/json") must_be_json(reply->body);
      if (reply->status < 200 || reply->status > 599) std::abort();
      return;
    }
    const auto& c = std::get<uma::http_route::Completion>(r.action);
    if (c.api.embedding) {
      if (c.request.embed_inputs.empty()) std::abort();
      must_be_json(uma::embeddings::response(c.api.model, {{0.5f, -1.0f}}, c.api.embedding_base64, 3));
      return;
    }
    if ((c.request.prompt.empty() && c.request.prompt_tokens.empty()) || c.request.max_tokens < 0) std::abort();
    encode_completion(c.api);
    // The answer in the request's API's shape: every streamed event and the whole body are JSON.
    if (!c.writer) std::abort();
    auto w = c.writer(c.api, "id-1", 1);
    std::string out;
    w->open(1, out);
    w->delta(0, uma::ChatDelta{"tok\xe2\x82", -1, {}, {}, {}, "why"}, {}, 0, out);
    w->delta(0, uma::ChatDelta{{}, 0, "call_1", "f", "{\"a\":", {}}, {}, 4, out);
    w->finish(0, {"tool_calls", ""}, {}, 4, out);
    w->close({3, 4}, out);
    w->fail(uma::Status(uma::ErrorCode::kInternal, "x"), out);
    const std::vector<uma::ToolCall> calls{{"call_1", "f", "{\"a\":1}"}};
    const uma::WholeChoice whole{"text", "why", {"stop", "x"}, {}, calls};
    must_be_json(w->whole(std::span<const uma::WholeChoice>(&whole, 1), {3, 4}));
    must_be_json(w->error_body(uma::Status(uma::ErrorCode::kBadRequest, "bad\xff", "p")));
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  static Harness h;
  const std::size_t step = std::size_t(data[0]) + 1;
  const bool ready = (data[1] & 1) == 0;
  std::string_view rest(reinterpret_cast<const char*>(data + 2), size - 2);
  uma::RequestReader reader;
  uma::ResponseReader responses(16 * 1024);
  uma::SseSplitter sse;
  const uma::HttpLimits limits{h.config.max_header_bytes, h.config.max_body_bytes};
  bool requests_done = false, responses_done = false;
  while (!rest.empty()) {
    const std::string_view piece = rest.substr(0, rest.size() < step ? rest.size() : step);
    rest.remove_prefix(piece.size());
    if (!responses_done) {
      // The same bytes as a server's reply: it parses or fails cleanly; SSE data splits out.
      responses.feed(piece);
      std::string body, error, data;
      if (!responses.pump(&body, &error)) {
        responses_done = true;
      } else {
        sse.feed(body);
        while (sse.next(&data)) {
        }
        if (responses.done()) responses.reset();
      }
    }
    if (requests_done) continue;
    reader.feed(piece);
    for (;;) {
      uma::HttpRequest req;
      uma::Status error;
      const uma::RequestReader::Result r = reader.next(limits, &req, &error);
      if (r == uma::RequestReader::Result::kNeedMore) break;
      if (r == uma::RequestReader::Result::kError) {  // the server answers 400 / 413 / 431 and closes
        if (error.ok()) std::abort();
        requests_done = true;
        break;
      }
      h.serve(req, ready);
      if (!req.keep_alive) {
        requests_done = true;
        break;
      }
    }
  }
  return 0;
}
