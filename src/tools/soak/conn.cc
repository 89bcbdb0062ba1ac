#include "tools/soak/conn.h"

namespace uma::soak {

Read EventReader::next(WireEvent* ev, Clock::time_point deadline, std::string* error) {
  std::string buf(pacer_.chunk(), '\0');
  while (true) {
    if (std::optional<FrameItem> f = rx_.next()) {
      if (f->error != ErrorCode::kOk) {
        *error = "a frame from the server is over the client's limit";
        return Read::kError;
      }
      if (Status st = parse_event(f->payload, ev); !st.ok()) {
        *error = "unparseable event " + quote(f->payload);
        return Read::kError;
      }
      return Read::kData;
    }
    if (!pacer_.before_read()) return Read::kStopped;
    std::size_t n = 0;
    const Read r = s_.read_some(buf.data(), buf.size(), deadline, &n, error);
    if (r != Read::kData) return r;
    pacer_.after_read(n);
    rx_.feed(std::string_view(buf.data(), n));
  }
}

}  // namespace uma::soak
