#include "httpkit/http_error.h"

#include <nlohmann/json.hpp>

#include "common/json_text.h"

namespace uma {

unsigned http_status(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidJson:
    case ErrorCode::kBadRequest:
    case ErrorCode::kInvalidArgument:
    case ErrorCode::kInvalidUtf8:
    case ErrorCode::kContainsNul:
    case ErrorCode::kEmptyPrompt:
    case ErrorCode::kContextExceeded: return 400;
    case ErrorCode::kPromptTooLarge:
    case ErrorCode::kFrameTooLarge: return 413;
    case ErrorCode::kOverloaded:
    case ErrorCode::kTooManySessions:
    case ErrorCode::kBusy: return 429;
    case ErrorCode::kShuttingDown:
    case ErrorCode::kUnavailable:
    case ErrorCode::kModelLoad: return 503;
    case ErrorCode::kNotFound: return 404;
    case ErrorCode::kUnauthorized: return 401;
    case ErrorCode::kNotSupported: return 501;
    default: return 500;
  }
}

std::string http_error_body(ErrorCode code, std::string_view message, std::string_view param) {
  const unsigned status = http_status(code);
  // llama-server's types where clients look for them (a key refused, a prompt past the context);
  // otherwise OpenAI's.
  const char* type = code == ErrorCode::kUnauthorized                       ? "authentication_error"
                     : code == ErrorCode::kNotSupported                     ? "not_supported_error"
                     : code == ErrorCode::kContextExceeded                  ? "exceed_context_size_error"
                     : status == 400 || status == 413 || status == 404      ? "invalid_request_error"
                     : status == 429                                        ? "rate_limit_error"
                     : status == 503                                        ? "service_unavailable"
                                                                            : "server_error";
  nlohmann::ordered_json e = {{"message", message}, {"type", type}, {"param", nullptr}, {"code", error_code_name(code)}};
  if (!param.empty()) e["param"] = param;
  return to_json_text(nlohmann::ordered_json{{"error", e}});
}

}  // namespace uma
