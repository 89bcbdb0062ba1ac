#include "gateway/sse_events.h"

#include <charconv>

namespace uma::gateway {

Status SseEvents::feed(std::string_view bytes, std::vector<SseEvent>* out) {
  buf_.append(bytes);
  std::size_t start = 0;
  for (;;) {
    const std::size_t end = buf_.find("\n\n", start);
    if (end == std::string::npos) break;
    if (Status st = take(std::string_view(buf_).substr(start, end + 2 - start), out); !st.ok()) return st;
    start = end + 2;
  }
  buf_.erase(0, start);
  if (buf_.size() > max_) return Status(ErrorCode::kBadRequest, "an agent's stream event is over " + std::to_string(max_) + " bytes");
  return Status::Ok();
}

Status SseEvents::take(std::string_view event, std::vector<SseEvent>* out) const {
  SseEvent e;
  std::size_t at = 0;
  while (at < event.size()) {
    std::size_t nl = event.find('\n', at);
    if (nl == std::string_view::npos) nl = event.size() - 1;
    const std::string_view line = event.substr(at, nl - at);
    at = nl + 1;
    if (line.rfind(": tokens", 0) == 0) {
      std::string_view ids = line.substr(8);
      while (!ids.empty()) {
        if (ids.front() == ' ') {
          ids.remove_prefix(1);
          continue;
        }
        std::int32_t t = 0;
        const auto [p, ec] = std::from_chars(ids.data(), ids.data() + ids.size(), t);
        if (ec != std::errc() || t < 0) return Status(ErrorCode::kBadRequest, "bad token ids from an agent");
        e.tokens.push_back(t);
        ids.remove_prefix(static_cast<std::size_t>(p - ids.data()));
      }
      continue;
    }
    if (!line.empty() && line.front() == ':') continue;  // another comment (a ping): nothing to forward
    if (line.empty() && at >= event.size()) break;
    e.forward.append(line);
    e.forward += '\n';
    if (line == "data: [DONE]") e.done = true;
    if (line.rfind("data: {\"error\"", 0) == 0) e.error = true;
  }
  if (e.forward.empty() && e.tokens.empty()) return Status::Ok();  // a blank or comment-only event
  e.forward += '\n';
  out->push_back(std::move(e));
  return Status::Ok();
}

}  // namespace uma::gateway
