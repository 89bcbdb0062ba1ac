#include "ipc/newline_wire.h"

namespace uma {

std::string_view newline_error_text(ErrorCode code) {
  switch (code) {
    case ErrorCode::kPromptTooLarge: return "prompt too large";
    case ErrorCode::kInvalidUtf8: return "invalid utf-8";
    case ErrorCode::kContainsNul: return "nul byte in prompt";
    case ErrorCode::kEmptyPrompt: return "empty prompt";
    case ErrorCode::kTooManySessions: return "too many sessions";
    case ErrorCode::kContextExceeded: return "prompt too long for context";
    case ErrorCode::kDecodeFailed:
    case ErrorCode::kKvExhausted:
    case ErrorCode::kKvPending: return "decode failed";
    case ErrorCode::kShuttingDown:
    case ErrorCode::kUnavailable: return "server shutting down";
    case ErrorCode::kInvalidArgument: return "invalid request";
    case ErrorCode::kBadRequest: return "bad request";
    case ErrorCode::kBusy: return "busy";
    case ErrorCode::kOverloaded: return "server overloaded";
    case ErrorCode::kNotFound: return "not found";
    case ErrorCode::kUnauthorized: return "unauthorized";
    case ErrorCode::kNotSupported: return "not supported";
    case ErrorCode::kOk:
    case ErrorCode::kFrameTooLarge:
    case ErrorCode::kInvalidJson:
    case ErrorCode::kIo:
    case ErrorCode::kModelLoad:
    case ErrorCode::kInternal: break;
  }
  return "internal error";
}

void append_escaped(std::string& out, std::string_view text) {
  for (char c : text) {
    switch (c) {
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\\': out += "\\\\"; break;
      default: out += c;
    }
  }
}

std::string unescape_reply(std::string_view line) {
  std::string out;
  out.reserve(line.size());
  for (std::size_t i = 0; i < line.size(); ++i) {
    if (line[i] != '\\' || i + 1 == line.size()) {
      out += line[i];
      continue;
    }
    const char c = line[++i];
    out += c == 'n' ? '\n' : c == 'r' ? '\r' : c;
  }
  return out;
}

}  // namespace uma
