// LineDecoder: the resumable parser of the newline protocol's input (nginx style: feed bytes as
// they arrive, take complete items out, "need more" is an empty optional).
//
// Each item is either a validated line or a typed input error. Checks, in order: size cap
// (max_line_bytes, enforced while the line is still arriving: an oversize line is reported once
// and the rest of it is discarded up to its '\n', never buffered), CR trim (one trailing '\r'),
// NUL rejection, UTF-8 validity, empty line. Memory held is bounded by max_line_bytes plus what the
// caller feeds before taking items out (buffered() lets the caller apply backpressure).
// Not thread-safe; one per connection.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"

namespace uma {

struct LineItem {
  ErrorCode error = ErrorCode::kOk;  // kOk: `line` holds a valid prompt line
  std::string line;
};

class LineDecoder {
 public:
  explicit LineDecoder(std::size_t max_line_bytes) : max_line_bytes_(max_line_bytes) {}

  void feed(std::string_view bytes);
  std::optional<LineItem> next();
  std::size_t buffered() const { return buf_.size() - head_; }

 private:
  std::size_t max_line_bytes_;
  std::string buf_;
  std::size_t head_ = 0;        // start of unconsumed bytes in buf_
  bool discarding_ = false;     // inside an oversize line already reported
};

}  // namespace uma
