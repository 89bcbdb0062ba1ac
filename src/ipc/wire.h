// The framed JSON protocol's vocabulary in one place: field names, event names, error codes and
// defaults. docs/PROTOCOL.md is the prose spec of exactly these constants; change them together.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "common/status.h"

namespace uma::wire {

// Frame: uint32 little-endian payload length, then that many bytes of UTF-8 JSON.
inline constexpr std::size_t kHeaderBytes = 4;
inline constexpr std::size_t kDefaultMaxFrameBytes = 1 << 20;

// Request fields.
inline constexpr std::string_view kId = "id";
inline constexpr std::string_view kPrompt = "prompt";
inline constexpr std::string_view kMaxTokens = "max_tokens";
inline constexpr std::string_view kTemperature = "temperature";
inline constexpr std::string_view kTopP = "top_p";
inline constexpr std::string_view kTopK = "top_k";
inline constexpr std::string_view kMinP = "min_p";
inline constexpr std::string_view kRepeatPenalty = "repeat_penalty";
inline constexpr std::string_view kFrequencyPenalty = "frequency_penalty";
inline constexpr std::string_view kPresencePenalty = "presence_penalty";
inline constexpr std::string_view kSeed = "seed";
inline constexpr std::string_view kIgnoreEos = "ignore_eos";   // as vLLM's: run to max_tokens
inline constexpr std::string_view kMinTokens = "min_tokens";   // no end of generation before this many
inline constexpr std::string_view kStop = "stop";
inline constexpr std::string_view kStream = "stream";
inline constexpr std::string_view kSlo = "slo";
inline constexpr std::string_view kTargetTtftMs = "target_ttft_ms";
inline constexpr std::string_view kTargetTbtMs = "target_tbt_ms";
inline constexpr std::string_view kMetadata = "metadata";
inline constexpr std::string_view kTenant = "tenant";    // metadata.tenant: the per-tenant cap's key
inline constexpr std::string_view kPriority = "priority";
inline constexpr std::string_view kSpeculative = "speculative";  // boolean: speculative decoding
inline constexpr std::string_view kPrediction = "prediction";    // string: the expected output (drafts to verify)
inline constexpr std::size_t kMaxPredictionBytes = 256 * 1024;
inline constexpr std::string_view kPriorityInteractive = "interactive";
inline constexpr std::string_view kPriorityBackground = "background";
inline constexpr std::size_t kMaxTenantBytes = 256;
inline constexpr std::size_t kMaxJsonDepth = 64;      // arrays/objects nested in one request
inline constexpr std::string_view kKeepAlive = "keep_alive";
inline constexpr std::string_view kGrammar = "grammar";         // GBNF the output must match
inline constexpr std::string_view kJsonSchema = "json_schema";  // a JSON schema the output must match
inline constexpr std::size_t kMaxGrammarBytes = 64 * 1024;
// Request: report each token's log-probability and this many alternatives (0..20); token and eos
// events then carry "logprobs": [{"token_id","text","bytes","logprob","top":[...]}].
inline constexpr std::string_view kLogprobs = "logprobs";
inline constexpr std::string_view kType = "type";        // {"type":"metrics"}
inline constexpr std::string_view kFormat = "format";    // {"type":"metrics","format":"prometheus"}
inline constexpr std::string_view kEvent = "event";      // {"event":"cancel","id":...} and every reply
inline constexpr std::size_t kMaxStopStrings = 16;
inline constexpr std::size_t kMaxStopBytes = 256;

// Event names.
inline constexpr std::string_view kEventToken = "token";
inline constexpr std::string_view kEventEos = "eos";
inline constexpr std::string_view kEventError = "error";
inline constexpr std::string_view kEventMetrics = "metrics";
inline constexpr std::string_view kEventCancel = "cancel";
inline constexpr std::string_view kTypeMetrics = "metrics";

// eos reasons.
inline constexpr std::string_view kReasonStop = "stop";
inline constexpr std::string_view kReasonLength = "length";
inline constexpr std::string_view kReasonCancelled = "cancelled";

// The wire name of an internal error (the one mapping; newline texts are in newline_wire.h).
std::string_view error_code(ErrorCode code);

}  // namespace uma::wire
