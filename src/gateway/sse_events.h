// SseEvents: the gateway's reading of an agent's event stream (the decoded body of a
// text/event-stream reply), resumable: fed bytes as they arrive in any pieces, it hands back each
// whole event (what ends with a blank line) once:
// - `forward`: the event as the client gets it, comments (umad's `: tokens`, pings) taken out;
// - `tokens`: the token ids that comment named (the tokens whose text the event carries: what a
//   resumed stream continues after);
// - `done`: the event is `data: [DONE]`; `error`: its data is an error object (mid-stream).
// Pure; no I/O. Caps: an event over max_event_bytes is an error (the stream is then broken).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace uma::gateway {

struct SseEvent {
  std::string forward;
  std::vector<std::int32_t> tokens;
  bool done = false;
  bool error = false;
};

class SseEvents {
 public:
  explicit SseEvents(std::size_t max_event_bytes = std::size_t{1} << 20) : max_(max_event_bytes) {}
  // Appends the whole events `bytes` completes to `out`; kBadRequest on an event over the cap or a
  // `: tokens` comment that is not a list of ids.
  Status feed(std::string_view bytes, std::vector<SseEvent>* out);
  std::size_t pending() const { return buf_.size(); }  // bytes of an event not yet whole

 private:
  Status take(std::string_view event, std::vector<SseEvent>* out) const;
  std::size_t max_;
  std::string buf_;
};

}  // namespace uma::gateway
