// Routing of one parsed HTTP request: method + target + body in, what to answer out. No sockets,
// no I/O, no state of its own, so the fuzz target (fuzz/http_fuzz.cc) drives exactly what the
// server runs with whatever bytes a client sends.
//
// Contract: route() never throws on client input (every JSON read is type-checked in
// openai::parse_request; every body it emits is valid JSON whatever bytes the target held). It
// reads the metrics (any thread may) and calls the chat renderer, which must not throw either; the
// server's exception boundary (net/stream_server.h) is the net for a renderer or bug that does.
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
#include "http/reply_writer.h"
#include "metrics/server_metrics.h"
#include "serve/request.h"

namespace uma::http_route {

// Renders a chat request (turns, tools) to a prompt with the model's or the configured template,
// and with tools, the grammar and the output parser (serve/chat_types.h).
using ChatTemplate = std::function<Status(const ChatRequest&, ChatPrompt*)>;

// Text to tokens with the model's vocabulary (add_special: its BOS; parse_special: control tokens
// written as text become theirs), and tokens back to text. Callable from any thread.
using Tokenize = std::function<Status(std::string_view text, bool add_special, bool parse_special, std::vector<std::int32_t>* out)>;
using TokenText = std::function<std::string(std::int32_t token)>;  // a token's bytes ("" when not in the vocabulary)
// A prompt's tokens with its images (one kImageMarker each), as the prepare stage would make them,
// without encoding an image (count_tokens).
using CountWithImages = std::function<Status(std::string_view prompt, const std::vector<std::string>& images, std::int32_t* n)>;

// What /v1/models, /props and /slots tell about the model and the daemon.
struct ModelFacts {
  std::int32_t n_ctx = 0;         // the context, all sequences together
  std::int32_t n_ctx_seq = 0;     // the most one request may hold
  std::int32_t n_ctx_train = 0;
  std::int32_t n_vocab = 0;
  std::int32_t n_embd = 0;        // an embedding's dimensions
  std::int64_t n_params = 0;
  std::int64_t size_bytes = 0;
  std::int32_t max_sessions = 0;
  std::string path;
  std::string chat_template;      // the template's source (or built-in name)
  std::int64_t created = 0;       // when the model was loaded (unix seconds)
  std::int32_t n_batch = 0;       // the most tokens one decode takes
  // The vocabulary's special tokens /infill builds its prompt with (-1: the model has none).
  std::int32_t bos = -1, eos = -1, sep = -1;
  bool add_bos = false, add_eos = false, add_sep = false;
  std::int32_t fim_pre = -1, fim_suf = -1, fim_mid = -1, fim_rep = -1, fim_sep = -1;
  bool reranker = false;          // rank pooling: /rerank scores documents with it
  bool vision = false;            // a vision projector (umad --mmproj): prompts may carry images
  std::string rerank_template;    // "{query}" / "{document}"; "" builds the prompt from the specials
};

struct Context {
  bool ready = false;          // the model is loaded
  bool shutting_down = false;
  std::string_view model_id = "umad";
  const ChatTemplate* chat_template = nullptr;  // null or empty: chat is not available
  const openai::Limits* limits = nullptr;
  const SamplingParams* default_sampling = nullptr;
  const SchemaToGrammar* schema_to_grammar = nullptr;  // null or empty: response_format json is refused
  const ServerMetrics* metrics = nullptr;
  // Null (or empty) where the server has no vocabulary of its own (the gateway): the endpoints that
  // need one are a 404.
  const Tokenize* tokenize = nullptr;
  const TokenText* token_text = nullptr;
  const CountWithImages* count_with_images = nullptr;  // null or empty: no vision projector
  const ModelFacts* facts = nullptr;
  // llama-server's switches: an endpoint turned off answers 501 (not_supported_error).
  bool slots_endpoint = true, metrics_endpoint = true;
  bool webui = false;  // GET / is the web page (webui/webui.h)
};

// A whole answer with a body. `error` is the kind the errors counter counts (kOk: not counted).
struct Reply {
  unsigned status = 200;
  std::string content_type = "application/json";
  std::string body;
  ErrorCode error = ErrorCode::kOk;
};

// The writer of a completion's answer in its API's shape (reply_writer.h), made once the request
// has its id.
using WriterFactory = std::function<std::unique_ptr<ReplyWriter>(const openai::CompletionRequest&, std::string id,
                                                                 std::int64_t created)>;

// A completion to run: the API's view (for encoding the answer) and the scheduler's (without an
// id or arrival time yet: the server assigns those).
struct Completion {
  openai::CompletionRequest api;
  Request request;
  std::unique_ptr<ChatOutputParser> tool_parser;  // tools the model may call: reads its calls
  WriterFactory writer;
  std::string id_prefix;  // the answer's id before the request's number: chatcmpl-, cmpl-, msg_, resp_
  // Another API's request (Anthropic's, Responses'): the OpenAI chat body it runs as (what a
  // gateway sends an agent); empty for OpenAI's own.
  std::string chat_body;
};

struct Routed {
  bool completion_endpoint = false;  // a completion (any API's) while serving (requests_total)
  std::variant<Reply, Completion> action;
};

Routed route(boost::beast::http::verb method, std::string_view target, std::string_view body, const Context& ctx);

// The completion a body asks for, as /v1/chat/completions (chat) or /v1/completions would run it;
// and /v1/embeddings'. Other APIs' routes build on them (the writer and id are theirs to set).
std::variant<Reply, Completion> completion_request(bool chat, std::string_view body, const Context& ctx);
std::variant<Reply, Completion> embeddings_request(std::string_view body, const Context& ctx);
std::variant<Reply, Completion> rerank_request(std::string_view body, const Context& ctx);  // http/rerank.h
// llama-server's /completion: the completion with its native answer (llama_server_api.h), and
// /infill's, whose prompt infill_body builds (http/infill.h).
std::variant<Reply, Completion> native_completion_request(std::string_view body, const Context& ctx);

// An error answer in OpenAI's shape with the status for `code`, counted under `code`.
Reply error_reply(ErrorCode code, std::string_view message);
Reply error_reply(const Status& st);  // names st.param() as OpenAI's `param`

}  // namespace uma::http_route
