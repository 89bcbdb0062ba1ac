// Length-prefixed frames: `uint32_le length | payload`. Resumable decoder (feed bytes as they
// arrive, take complete frames out; an empty optional means "need more").
//
// The length is checked against max_frame_bytes as soon as the 4-byte header is in, before any of
// the payload is kept: an oversize frame yields kFrameTooLarge and the decoder then refuses
// everything (the stream cannot be resynchronized; the connection is to be closed).
// Memory held: at most one header + max_frame_bytes + what was fed since the last next().
// Not thread-safe; one per connection.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"

namespace uma {

struct FrameItem {
  ErrorCode error = ErrorCode::kOk;
  std::string payload;
};

class FrameDecoder {
 public:
  explicit FrameDecoder(std::size_t max_frame_bytes) : max_frame_bytes_(max_frame_bytes) {}
  void feed(std::string_view bytes);
  std::optional<FrameItem> next();
  std::size_t buffered() const { return failed_ ? 0 : buf_.size() - head_; }

 private:
  std::size_t max_frame_bytes_;
  std::string buf_;
  std::size_t head_ = 0;
  bool failed_ = false;
};

void append_frame(std::string& out, std::string_view payload);

}  // namespace uma
