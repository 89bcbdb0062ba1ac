#include "common/status.h"

namespace uma {

std::string_view error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::kOk: return "ok";
    case ErrorCode::kInvalidArgument: return "invalid_argument";
    case ErrorCode::kPromptTooLarge: return "prompt_too_large";
    case ErrorCode::kInvalidUtf8: return "invalid_utf8";
    case ErrorCode::kContainsNul: return "contains_nul";
    case ErrorCode::kEmptyPrompt: return "empty_prompt";
    case ErrorCode::kTooManySessions: return "too_many_sessions";
    case ErrorCode::kContextExceeded: return "context_exceeded";
    case ErrorCode::kDecodeFailed: return "decode_failed";
    case ErrorCode::kShuttingDown: return "shutting_down";
    case ErrorCode::kIo: return "io";
    case ErrorCode::kModelLoad: return "model_load";
    case ErrorCode::kFrameTooLarge: return "frame_too_large";
    case ErrorCode::kInvalidJson: return "invalid_json";
    case ErrorCode::kBadRequest: return "bad_request";
    case ErrorCode::kBusy: return "busy";
    case ErrorCode::kOverloaded: return "overloaded";
    case ErrorCode::kKvExhausted: return "kv_exhausted";
    case ErrorCode::kKvPending: return "kv_pending";
    case ErrorCode::kUnavailable: return "unavailable";
    case ErrorCode::kNotFound: return "model_not_found";
    case ErrorCode::kUnauthorized: return "invalid_api_key";
    case ErrorCode::kNotSupported: return "not_supported";
    case ErrorCode::kInternal: return "internal";
  }
  return "unknown";
}

std::string Status::to_string() const {
  if (ok()) return "ok";
  std::string s(error_code_name(code_));
  if (!message_.empty()) s += ": " + message_;
  return s;
}

}  // namespace uma
