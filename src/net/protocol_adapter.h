// ProtocolAdapter: one connection's wire format as a front end serves it, between bytes and typed
// inputs and events: framing and JSON, nothing else. The server under it (net/stream_server.h)
// does everything else the same way for every front end: sockets, session slots, request ids,
// cancelling, the write cap, timers, shutdown. Implementations: ipc/protocols.cc (framed JSON and
// newline over the Unix socket) and http/http_server.cc (HTTP/1.1 + the OpenAI API).
//
// Threading: none; one adapter per connection, used on the I/O thread. The server never calls
// encode() or started() unless a request of this adapter is in flight.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "common/status.h"
#include "serve/request.h"

namespace uma {

class ProtocolAdapter {
 public:
  // A request to run. The adapter keeps what it needs to encode the reply.
  struct Start {
    Request request;  // without id and received_at: the server assigns them
    // Run it this many times (OpenAI's `n`): requests with consecutive ids from the one started()
    // names, each with its own session slot, the same prompt (the prefix cache shares its KV) and
    // choice i's seed + i. The request ends when the last of them has.
    std::int32_t choices = 1;
    // More than one (OpenAI's prompt array): choice i runs prompts[i / (choices / prompts.size())]
    // instead of the request's own prompt; choices is a multiple of their number.
    std::vector<PromptInput> prompts;
  };
  // Cancel the request in flight.
  struct Cancel {};
  // A whole answer the adapter encoded itself: an error, metrics, an HTTP reply without a request.
  struct Answer {
    std::string bytes;
    ErrorCode error = ErrorCode::kOk;  // counted in the errors metric unless kOk
    bool close = false;                // close the connection once it is sent
  };
  // Work to do off the I/O thread before the input it read can be served (a large body's parse, a
  // chat's rendering): the server runs `work` on its offload pool (or right here, without one),
  // serves nothing else of this connection meanwhile, then calls next() again, which returns what
  // the work made of it. `work` touches only what it owns: the adapter goes on being fed.
  struct Defer {
    std::function<void()> work;
  };
  using Input = std::variant<Start, Cancel, Answer, Defer>;

  virtual ~ProtocolAdapter() = default;

  virtual void feed(std::string_view bytes) = 0;
  virtual std::size_t buffered() const = 0;      // input fed and not yet taken by next()
  virtual std::size_t max_buffered() const = 0;  // reading pauses above this (backpressure)
  // The next thing the buffered input asks for; nullopt: nothing (yet). `busy`: a request of this
  // connection is in flight (a protocol that cannot take another answers with an error, or waits).
  virtual std::optional<Input> next(bool busy) = 0;

  // The Start last returned runs as request `id` (its choices as id, id + 1, ...); what to send
  // before its first event (HTTP: the SSE headers), appended to `out`.
  virtual void started(RequestId id, std::string& out) = 0;
  // The Start last returned was refused (`why`: every session slot is taken): the answer.
  virtual Answer refused(const Status& why) = 0;
  // One event of the request in flight (of one of its choices: ev.request_id says which),
  // appended to `out` (may append nothing: a non-streamed reply collects its text until the last
  // event).
  virtual void encode(const Event& ev, std::string& out) = 0;
  // Whether the connection stays open after the request in flight (or the last answer) ends.
  virtual bool keep_alive() const = 0;
  // A handler threw: the answer that ends the connection (may be empty, e.g. mid-stream on HTTP).
  virtual std::string internal_error() = 0;
};

}  // namespace uma
