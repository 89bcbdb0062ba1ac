// Typed messages between the I/O thread and the compute thread. No JSON, no bytes-on-the-wire here:
// protocol adapters (ipc/) build a Request from what a client sent and encode Events back.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "common/status.h"
#include "serve/sampling.h"

namespace uma {

using Clock = std::chrono::steady_clock;
using RequestId = std::uint64_t;  // unique for the daemon's lifetime, assigned by the I/O thread

inline double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// Request classes: interactive streams are served first; background work fills what
// is left, may be paused (preempted) for interactive work, and is never starved past a bound.
enum class Priority : std::uint8_t { kInteractive, kBackground };

// A prompt as a client gave it: text, or token ids (used as they are, no BOS added).
// One prompt: text, token ids, or both in turn (llama-server's mixed prompt, [12, "text", 34]),
// whose text pieces become tokens on the front end (the first with the model's BOS when it is text).
struct PromptPiece {
  std::string text;                  // or
  std::vector<std::int32_t> tokens;
};
struct PromptInput {
  std::string text;
  std::vector<std::int32_t> tokens;
  std::vector<PromptPiece> mixed;  // set instead of text and tokens
  std::vector<std::string> images;  // llama-server's multimodal_data: one per image marker in text
};

// The text put where an image goes in a prompt's text (libmtmd's default media marker): the
// prepare stage puts each image's embeddings there, in order.
inline constexpr std::string_view kImageMarker = "<__media__>";

// An image of a prompt, made by the prepare stage from a client's bytes: its input embeddings, which
// fill prompt positions [pos, pos + n_tokens) instead of token ids. The prompt's tokens there are
// stand-ins derived from the image's hash (negative: never in a vocabulary), so a kept prefix that
// holds the same image at the same place matches in the prefix cache and one with another does not.
struct PromptImage {
  std::int32_t pos = 0;
  std::int32_t n_tokens = 0;
  std::shared_ptr<const std::vector<float>> embd;  // n_tokens rows of the model's input width
  const float* row(std::int32_t p) const { return embd->data() + (embd->size() / n_tokens) * (p - pos); }
  bool holds(std::int32_t p) const { return p >= pos && p < pos + n_tokens; }
};

struct Request {
  RequestId id = 0;
  Priority priority = Priority::kInteractive;
  std::string tenant;             // metadata.tenant; empty: none (no per-tenant cap applies)
  std::string prompt;             // valid UTF-8, checked at the edge
  // The prompt as token ids, as a client gave them (OpenAI's token-array prompt): used as they are
  // (no BOS added) instead of `prompt` when not empty.
  std::vector<std::int32_t> prompt_tokens;
  // Tokens to generate at most, as the client asked: then prompt + max_tokens beyond the context is
  // an error (kContextExceeded, param "max_tokens"). 0: not asked; the daemon's default applies,
  // and generation simply stops at the context's end.
  std::int32_t max_tokens = 0;
  // llama-server's n_predict: one past the context generates to the context's end (`length`)
  // instead of being refused as OpenAI's max_tokens is.
  bool max_tokens_to_context_end = false;
  // llama-server's return_progress: a kProgress event after each of its prompt's chunks.
  bool report_progress = false;
  SamplingParams sampling;
  std::vector<std::string> stop;  // generation ends before any of these; never emitted
  bool parse_special = false;     // the prompt holds control tokens as text (a chat template's)
  // Tokens that follow the tokenized prompt: a stream resumed on this daemon after another one
  // generated them (the gateway's mid-stream failover). Part of the prompt for everything else.
  std::vector<std::int32_t> continuation;  // token ids (Token, runtime/decoder.h)
  // Images, one per image marker (http/image_input.h) in `prompt`, as a client sent them (PNG, JPEG,
  // ...): the prepare stage turns the prompt and them into `prompt_tokens` and `prompt_images`.
  std::vector<std::string> images;
  std::vector<PromptImage> prompt_images;  // sorted by position, apart
  // Not ok: the prepare stage could not make the prompt (a bad image); the scheduler answers this.
  Status prepare_status;
  // Not empty: an embeddings request (sched/embed_queue.h) of these inputs, each a whole token
  // sequence; nothing is generated, and the one kDone event carries a vector per input.
  std::vector<std::vector<std::int32_t>> embed_inputs;
  double slo_ttft_ms = 0.0;       // 0: the daemon's default
  double slo_tbt_ms = 0.0;        // 0: the daemon's default
  // Speculative decoding for this request (sched/speculation.h); unset: the daemon's default.
  std::optional<bool> speculative;
  // The expected output (OpenAI's `prediction`): where generation follows it, its tokens are
  // drafts to verify. Empty: none.
  std::string prediction;
  Clock::time_point received_at{};
};

struct CancelRequest {  // client went away or asked to stop; idempotent
  RequestId id = 0;
};

// I/O thread -> compute thread.
using WorkItem = std::variant<Request, CancelRequest>;

enum class FinishReason : std::uint8_t { kStop, kLength, kCancelled };

// Compute thread -> I/O thread. For one request: zero or more kToken (and, when it asked, kProgress
// while its prompt is prefilled), then exactly one kDone or kError (a cancelled request ends with
// kDone, reason kCancelled).

struct Event {
  enum class Kind : std::uint8_t { kToken, kDone, kError, kProgress };
  RequestId request_id = 0;
  Kind kind = Kind::kToken;
  std::string text;            // kToken: complete UTF-8 (never a split code point)
  std::int32_t token_id = -1;  // kToken: the token that completed `text` (-1 for held-back text)
  // kToken (and kDone, for a code point cut at the end): with SamplingParams::logprobs, one entry
  // per generated token whose text this event releases. A token held back by the stop filter comes
  // with the event that releases its text; when a stop string matches, the tokens not yet released
  // go with the text released before the stop string, or are dropped when there is none.
  std::vector<LogprobEntry> logprobs;
  FinishReason reason = FinishReason::kStop;  // kDone
  std::string stop_word;                      // kDone: the stop string that ended the text, if one did
  Status error;                               // kError
  std::int32_t prompt_tokens = 0;             // kDone, kProgress, and a request's first kToken
  std::int32_t prompt_processed = 0;          // kProgress: prompt tokens in KV so far (cached ones included)
  std::int32_t completion_tokens = 0;         // kDone
  std::int32_t cached_tokens = 0;             // kDone and the first kToken: prompt tokens whose KV the prefix cache gave
  double queue_ms = 0.0;                      // kDone: received -> prefill started
  double ttft_ms = -1.0;                      // kDone: received -> first token (-1: none)
  double bytes_per_token = 0.0;               // kDone: its share of the ticks' bytes per generated token
  double total_ms = 0.0;                      // kDone: received -> end
  // kDone of a request with a prediction: its draft tokens accepted and rejected in verification.
  std::int32_t accepted_prediction_tokens = 0;
  std::int32_t rejected_prediction_tokens = 0;
  std::vector<std::vector<float>> embeddings;  // kDone of an embeddings request: one per input
};

inline Event error_event(RequestId id, Status status) {
  Event e;
  e.request_id = id;
  e.kind = Event::Kind::kError;
  e.error = std::move(status);
  return e;
}

}  // namespace uma
