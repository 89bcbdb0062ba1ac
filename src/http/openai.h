// The OpenAI-compatible API's JSON, at the HTTP edge: request bodies of /v1/completions and
// /v1/chat/completions turned into typed structs at once, and responses, SSE chunks and errors
// encoded in OpenAI's shapes. Nothing else in umad sees this JSON.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "serve/chat_types.h"
#include "common/status.h"
#include "http/image_input.h"
#include "httpkit/http_error.h"
#include "serve/sampling.h"
#include "serve/request.h"

namespace uma::openai {

using ChatMessage = ChatTurn;

// umad's own request field `uma`: what a gateway in front of it (uma-gw, docs/CLUSTER.md) asks for.
struct GatewayOptions {
  bool token_ids = false;            // each streamed chunk is preceded by `: tokens ID ...` (its tokens)
  std::vector<std::int32_t> resume;  // tokens generated elsewhere: the prompt continues with them
  std::string id;                    // the completion's id and creation time, when it began elsewhere
  std::int64_t created = 0;
  // The prompt as the gateway tokenized it (the same vocabulary and template): used instead of
  // tokenizing it again. One prompt only.
  std::vector<std::int32_t> prompt_tokens;
};

// Which API's shape an embeddings answer takes.
enum class EmbeddingShape : std::uint8_t { kOpenAi, kOllama, kOllamaLegacy, kRerank };

struct CompletionRequest {
  bool chat = false;
  std::string model;
  // /v1/completions: one or more prompts (text or token ids), each run `n` times; choice i is
  // prompt i / n's.
  std::vector<PromptInput> prompts;
  std::vector<ChatMessage> messages;  // /v1/chat/completions
  std::vector<std::string> images;    // chat: one per kImageMarker in the messages' text, in order
  std::optional<std::int32_t> max_tokens;
  SamplingParams sampling;            // starts as the daemon's defaults
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;         // stream_options.include_usage
  std::string user;                   // -> metadata tenant
  std::string prediction;              // OpenAI's prediction.content: the expected output, drafts to verify
  std::optional<bool> speculative;    // umad's extension: speculative decoding; unset: the daemon's default
  // response_format json_object / json_schema: the schema the output must match (json_object: any
  // object); empty: free text. The router turns it into the grammar.
  std::string json_schema;
  // chat logprobs: true -> top_logprobs (0..20); completions logprobs: N (0..20); -1: none. Also
  // in sampling.logprobs.
  std::int32_t logprobs = -1;
  // chat tools: the functions the model may call, and how (a named tool_choice is kRequired with
  // forced_tool naming it).
  std::vector<ChatTool> tools;
  ToolChoice tool_choice = ToolChoice::kAuto;
  std::string forced_tool;
  bool parallel_tool_calls = true;
  std::int32_t n = 1;  // choices of each prompt
  GatewayOptions uma;
  // Top-level `grammar` (GBNF, llama-server's and vLLM's extension); empty: none.
  std::string grammar;
  // chat_template_kwargs (values as JSON text) and the thinking switch (chat_template_kwargs
  // enable_thinking, or reasoning_effort "none"); unset: the template's default.
  std::map<std::string, std::string> template_kwargs;
  std::optional<bool> enable_thinking;
  // llama-server's add_generation_prompt (default true) and continue_final_message (a last
  // assistant message is continued by default, llama-server's prefill).
  bool add_generation_prompt = true;
  ChatContinuation continuation = ChatContinuation::kNone;
  // llama-server's: the final /completion object cut to these paths ("a/b" lifts b out of a), and
  // its final object under "__verbose" in an OpenAI answer.
  std::vector<std::string> response_fields;
  bool verbose = false;
  bool return_progress = false;  // streamed /completion: prompt_progress after each prefill chunk
  // Fields no one defined, accepted and ignored (named in a response header, counted in /metrics).
  std::vector<std::string> ignored_fields;
  // An embeddings request (POST /v1/embeddings): its answer is vectors, base64 or floats, in the
  // shape of the API it came by.
  bool embedding = false;
  EmbeddingShape embedding_shape = EmbeddingShape::kOpenAi;
  bool embedding_base64 = false;
  // kRerank: what shapes the answer (http/rerank.h); the documents only when returned with it.
  struct Rerank {
    std::int32_t top_n = 0;
    bool tei = false;
    bool return_text = false;
    std::vector<std::string> documents;
  };
  Rerank rerank;
};
// Choices of one request in all (prompts x n): each takes a session.
inline constexpr std::int32_t kMaxChoices = 16;
inline constexpr std::size_t kMaxStops = 16;

struct Limits {
  std::size_t max_prompt_bytes = 64 * 1024;
  ImageLimits images;
  // --strict-fields: a field umad does not know is a 400 (by default it is ignored and named).
  bool strict_fields = false;
};
// max_tokens above this is a 400 at once; below it, the context decides (the scheduler).
inline constexpr std::int64_t kMaxTokensField = std::int64_t{1} << 30;

// kInvalidJson, kBadRequest (naming the field) or kPromptTooLarge on bad input.
Status parse_request(std::string_view body, bool chat, const Limits& limits, const SamplingParams& defaults,
                     CompletionRequest* out);

struct Usage {
  std::int32_t prompt_tokens = 0, completion_tokens = 0;
  std::int32_t cached_tokens = 0;  // of prompt_tokens, those whose KV the prefix cache gave
  // The first choice's prompt time (prefill started -> first token) and generation time (first
  // token -> end), for llama-server's `timings`.
  double prompt_ms = 0.0, predicted_ms = 0.0;
  // A request with a prediction: usage.completion_tokens_details says these (its draft tokens
  // accepted and rejected in verification).
  bool prediction = false;
  std::int32_t accepted_prediction_tokens = 0, rejected_prediction_tokens = 0;
};

// Stream chunks (the JSON after "data: "). finish_reason empty: not finished. With r.logprobs,
// `logprobs` are the tokens whose text the chunk carries; `text_offset`: bytes of completion text
// before this chunk (completions' text_offset).
// A finishing chunk also carries vLLM's `stop_reason`: the stop string that ended the text (null
// when none did).
std::string chunk(const CompletionRequest& r, std::string_view id, std::int64_t created, std::string_view text,
                  std::string_view finish_reason, bool first, std::span<const LogprobEntry> logprobs = {},
                  std::size_t text_offset = 0, std::size_t index = 0, std::string_view stop_word = {});
// A chunk of a tool-enabled chat stream: one delta (content or a piece of a tool call).
std::string delta_chunk(const CompletionRequest& r, std::string_view id, std::int64_t created, const ChatDelta& d,
                        bool first, std::span<const LogprobEntry> logprobs = {}, std::size_t index = 0);
std::string usage_chunk(const CompletionRequest& r, std::string_view id, std::int64_t created, const Usage& u);
// A whole (non-streamed) response.
// One choice of a whole response. `calls`: the tool calls of a chat reply (its content is then
// null when empty).
struct Choice {
  std::string_view text;
  std::string_view finish_reason;
  std::span<const LogprobEntry> logprobs = {};
  std::span<const ToolCall> calls = {};
  std::string_view reasoning = {};  // a thinking model's reasoning_content
  std::string_view stop_word = {};  // the stop string that ended it (vLLM's stop_reason)
};
std::string response(const CompletionRequest& r, std::string_view id, std::int64_t created,
                     std::span<const Choice> choices, const Usage& u);
inline std::string response(const CompletionRequest& r, std::string_view id, std::int64_t created, std::string_view text,
                            std::string_view finish_reason, const Usage& u, std::span<const LogprobEntry> logprobs = {},
                            std::span<const ToolCall> calls = {}) {
  const Choice one{text, finish_reason, logprobs, calls};
  return response(r, id, created, std::span<const Choice>(&one, 1), u);
}
std::string models(std::string_view model_id, std::int64_t created);


}  // namespace uma::openai
