#include "ipc/line_decoder.h"

#include "common/utf8.h"

namespace uma {

void LineDecoder::feed(std::string_view bytes) {
  if (discarding_) {
    const std::size_t nl = bytes.find('\n');
    if (nl == std::string_view::npos) return;  // still inside the oversize line
    discarding_ = false;
    bytes.remove_prefix(nl + 1);
  }
  if (head_ > 0 && head_ == buf_.size()) {
    buf_.clear();
    head_ = 0;
  }
  buf_.append(bytes);
}

std::optional<LineItem> LineDecoder::next() {
  const std::size_t nl = buf_.find('\n', head_);
  if (nl == std::string::npos) {
    // A partial line longer than allowed (+1 for a CR that may still be trimmed) is reported
    // now, and its bytes are dropped as they come.
    if (buffered() > max_line_bytes_ + 1) {
      buf_.clear();
      head_ = 0;
      discarding_ = true;
      return LineItem{ErrorCode::kPromptTooLarge, {}};
    }
    if (head_ > 0) {  // compact so the buffer never holds more than one partial line
      buf_.erase(0, head_);
      head_ = 0;
    }
    return std::nullopt;
  }
  std::string_view line(buf_.data() + head_, nl - head_);
  head_ = nl + 1;
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  LineItem item;
  if (line.size() > max_line_bytes_) item.error = ErrorCode::kPromptTooLarge;
  else if (line.find('\0') != std::string_view::npos) item.error = ErrorCode::kContainsNul;
  else if (!is_valid_utf8(line)) item.error = ErrorCode::kInvalidUtf8;
  else if (line.empty()) item.error = ErrorCode::kEmptyPrompt;
  else item.line.assign(line);
  return item;
}

}  // namespace uma
