#include "ipc/frame_codec.h"

#include <cstdint>

#include "ipc/wire.h"

namespace uma {

void FrameDecoder::feed(std::string_view bytes) {
  if (failed_) return;
  if (head_ > 0 && head_ == buf_.size()) {
    buf_.clear();
    head_ = 0;
  }
  buf_.append(bytes);
}

std::optional<FrameItem> FrameDecoder::next() {
  if (failed_) return FrameItem{ErrorCode::kFrameTooLarge, {}};
  if (buffered() < wire::kHeaderBytes) return std::nullopt;
  const auto* h = reinterpret_cast<const unsigned char*>(buf_.data() + head_);
  const std::uint32_t len = std::uint32_t(h[0]) | std::uint32_t(h[1]) << 8 | std::uint32_t(h[2]) << 16 |
                            std::uint32_t(h[3]) << 24;
  if (len > max_frame_bytes_) {
    failed_ = true;
    std::string().swap(buf_);  // give the memory back now
    head_ = 0;
    return FrameItem{ErrorCode::kFrameTooLarge, {}};
  }
  if (buffered() < wire::kHeaderBytes + len) {
    if (head_ > 0) {  // compact: keep only the partial frame
      buf_.erase(0, head_);
      head_ = 0;
    }
    return std::nullopt;
  }
  FrameItem item;
  item.payload.assign(buf_, head_ + wire::kHeaderBytes, len);
  head_ += wire::kHeaderBytes + len;
  return item;
}

void append_frame(std::string& out, std::string_view payload) {
  const auto len = static_cast<std::uint32_t>(payload.size());
  const char header[4] = {static_cast<char>(len & 0xFF), static_cast<char>((len >> 8) & 0xFF),
                          static_cast<char>((len >> 16) & 0xFF), static_cast<char>((len >> 24) & 0xFF)};
  out.append(header, 4);
  out.append(payload);
}

}  // namespace uma
