// Typed messages between the I/O thread and the compute thread. No JSON, no bytes-on-the-wire here:
// protocol adapters (ipc/) build a Request from what a client sent and encode Events back.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <variant>

#include "common/status.h"
#include "runtime/sampling.h"

namespace uma {

using Clock = std::chrono::steady_clock;
using RequestId = std::uint64_t;  // unique for the daemon's lifetime, assigned by the I/O thread

struct Request {
  RequestId id = 0;
  std::string prompt;             // valid UTF-8, checked at the edge
  std::int32_t max_tokens = 0;    // tokens to generate at most
  SamplingParams sampling;
  Clock::time_point received_at{};
};

struct CancelRequest {  // client went away or asked to stop; idempotent
  RequestId id = 0;
};

// I/O thread -> compute thread.
using WorkItem = std::variant<Request, CancelRequest>;

enum class FinishReason : std::uint8_t { kStop, kLength, kCancelled };

// Compute thread -> I/O thread. For one request: zero or more kToken, then exactly one kDone or
// kError (none after a cancel, whose outcome nobody is waiting for).
struct Event {
  enum class Kind : std::uint8_t { kToken, kDone, kError };
  RequestId request_id = 0;
  Kind kind = Kind::kToken;
  std::string text;            // kToken: complete UTF-8 (never a split code point)
  std::int32_t token_id = -1;  // kToken: the token that completed `text` (-1 for held-back text)
  FinishReason reason = FinishReason::kStop;  // kDone
  Status error;                               // kError
  std::int32_t prompt_tokens = 0;             // kDone
  std::int32_t completion_tokens = 0;         // kDone
};

}  // namespace uma
