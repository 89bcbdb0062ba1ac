// Protocol: one Unix-socket connection's wire format, between bytes and typed actions/events. It
// only parses and encodes; UdsServer's adapter (uds_server.cc) turns its actions into the shared
// serving layer's inputs (net/protocol_adapter.h), which does sockets, TX, slots and request ids
// for every front end.
//
// Implementations: newline and framed JSON. Not thread-safe; one per
// connection, used on the I/O thread.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include "common/status.h"
#include "serve/request.h"

namespace uma {

struct StartInput {         // a new request (the server assigns id and received_at)
  Request request;
  std::string client_id;
  bool stream = true;
  bool keep_alive = true;
  std::string metadata_json;
};
struct CancelInput {
  std::string client_id;
};
struct MetricsInput {
  bool prometheus = false;
};
struct InputError {
  ErrorCode code = ErrorCode::kInternal;
  std::string message;
  std::string client_id;
  bool close = false;       // the stream cannot continue: flush the error, then close
  std::string param;        // the request field at fault, when one is
};
using InputAction = std::variant<StartInput, CancelInput, MetricsInput, InputError>;

// The reply in progress on a connection, as its protocol needs to encode it.
struct ReplyState {
  std::string client_id;
  bool stream = true;
  bool keep_alive = true;
  std::string metadata_json;
  std::string text;         // stream:false: the text so far
  bool line_open = false;   // newline: reply bytes sent without the final '\n'
  bool logprobs = false;    // the request asked for logprobs
  std::vector<LogprobEntry> logprob_entries{};  // stream:false: every token's so far
  bool prediction = false;  // the request gave a prediction: usage says what it gave
};

struct ProtocolLimits {
  std::size_t max_prompt_bytes = 64 * 1024;
  std::size_t max_frame_bytes = 1 << 20;
  SamplingParams sampling;  // defaults for fields a request leaves out
  SchemaToGrammar schema_to_grammar;  // json_schema requests; empty: refused
};

class Protocol {
 public:
  virtual ~Protocol() = default;
  virtual void feed(std::string_view bytes) = 0;
  // The next thing the input asks for. `busy`: a reply is in flight (newline input then waits
  // its turn; framed input is parsed at once so cancel frames are seen).
  virtual std::optional<InputAction> next(bool busy) = 0;
  virtual std::size_t buffered() const = 0;
  virtual std::size_t max_buffered() const = 0;  // stop reading beyond this (backpressure)

  virtual void encode_token(ReplyState& reply, const Event& ev, std::string& out) = 0;
  virtual void encode_done(ReplyState& reply, const Event& ev, std::string& out) = 0;
  virtual void encode_error(ReplyState* reply, const std::string& client_id, const Status& error, std::string& out) = 0;
  // `body`: the JSON snapshot, or Prometheus text when `prometheus`.
  virtual void encode_metrics(const std::string& body, bool prometheus, std::string& out) = 0;
};

enum class ProtocolKind { kJson, kNewline };
std::unique_ptr<Protocol> make_protocol(ProtocolKind kind, const ProtocolLimits& limits);

}  // namespace uma
