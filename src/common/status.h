// Status: the one error type inside UMA Serve.
//
// Contract: errors are values, never exceptions across layers. A Status is cheap to copy when ok
// (no allocation) and carries an ErrorCode plus a human message otherwise, and, when one request
// field is at fault, its name (`param`, as OpenAI's error body has it). Wire protocols map an
// ErrorCode to their own text or code in exactly one place per protocol.
// Thread-safety: a Status is a plain value; share copies, not references.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

namespace uma {

enum class ErrorCode : std::uint8_t {
  kOk = 0,
  kInvalidArgument,   // a bad flag or parameter
  kPromptTooLarge,    // prompt bytes over --max-prompt-bytes
  kInvalidUtf8,       // input is not valid UTF-8
  kContainsNul,       // input contains a NUL byte
  kEmptyPrompt,       // nothing to complete
  kTooManySessions,   // --max-sessions reached
  kContextExceeded,   // prompt (+ room to generate) does not fit the context
  kDecodeFailed,      // llama_decode failed
  kShuttingDown,      // the daemon is stopping
  kIo,                // socket or file error
  kModelLoad,         // model or context could not be created
  kFrameTooLarge,     // a protocol frame over --max-frame-bytes
  kInvalidJson,       // a frame that is not JSON
  kBadRequest,        // a request field missing or of the wrong type/range
  kBusy,              // a second request while one is in flight
  kOverloaded,        // the waiting queue is full, or a request waited too long for room
  kKvExhausted,       // no KV cells for a batch; the scheduler recovers (never sent to a client)
  kKvPending,         // a KV copy between streams waits for the next decode (never sent to a client)
  kUnavailable,       // the gateway: no agent can serve the request now
  kNotFound,          // a model (or other named thing) that does not exist
  kUnauthorized,      // a request without the key the server requires (--api-key-file)
  kNotSupported,      // an endpoint the operator turned off (--no-slots, --no-metrics)
  kInternal,          // a bug: an invariant did not hold (keep last: sizes tables)
};

std::string_view error_code_name(ErrorCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(ErrorCode code, std::string message) : code_(code), message_(std::move(message)) {}
  Status(ErrorCode code, std::string message, std::string param)
      : code_(code), message_(std::move(message)), param_(std::move(param)) {}
  static Status Ok() { return {}; }

  bool ok() const { return code_ == ErrorCode::kOk; }
  ErrorCode code() const { return code_; }
  const std::string& message() const { return message_; }
  const std::string& param() const { return param_; }  // the request field at fault; empty: none
  std::string to_string() const;

 private:
  ErrorCode code_ = ErrorCode::kOk;
  std::string message_;
  std::string param_;
};

}  // namespace uma
