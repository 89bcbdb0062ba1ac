#include "http/image_input.h"

#include "common/base64.h"

namespace uma {
namespace {

std::uint32_t be16(std::string_view b, std::size_t at) {
  return (static_cast<std::uint32_t>(static_cast<unsigned char>(b[at])) << 8) | static_cast<unsigned char>(b[at + 1]);
}
std::uint32_t be32(std::string_view b, std::size_t at) { return (be16(b, at) << 16) | be16(b, at + 2); }
std::uint32_t le16(std::string_view b, std::size_t at) {
  return (static_cast<std::uint32_t>(static_cast<unsigned char>(b[at + 1])) << 8) | static_cast<unsigned char>(b[at]);
}
std::int32_t le32(std::string_view b, std::size_t at) {
  return static_cast<std::int32_t>((le16(b, at + 2) << 16) | le16(b, at));
}

// JPEG: the first start-of-frame marker (SOF0..SOF15 but DHT, JPG and DAC) holds the size.
bool jpeg_size(std::string_view b, ImageSize* out) {
  std::size_t at = 2;
  while (at + 4 <= b.size()) {
    if (static_cast<unsigned char>(b[at]) != 0xFF) return false;
    const auto marker = static_cast<unsigned char>(b[at + 1]);
    if (marker == 0xFF) {  // fill byte
      ++at;
      continue;
    }
    if (marker == 0xD8 || (marker >= 0xD0 && marker <= 0xD7) || marker == 0x01) {  // no length
      at += 2;
      continue;
    }
    const std::uint32_t length = be16(b, at + 2);
    const bool sof = marker >= 0xC0 && marker <= 0xCF && marker != 0xC4 && marker != 0xC8 && marker != 0xCC;
    if (sof) {
      if (at + 9 > b.size()) return false;
      out->height = be16(b, at + 5);
      out->width = be16(b, at + 7);
      return true;
    }
    if (length < 2) return false;
    at += 2 + length;
  }
  return false;
}

Status too_big(const std::string& field, const std::string& what) {
  return Status(ErrorCode::kPromptTooLarge, "'" + field + "': " + what, field);
}

}  // namespace

bool sniff_image_size(std::string_view b, ImageSize* out) {
  if (b.size() >= 24 && b.substr(0, 8) == std::string_view("\x89PNG\r\n\x1a\n", 8) && b.substr(12, 4) == "IHDR") {
    *out = {be32(b, 16), be32(b, 20)};
    return true;
  }
  if (b.size() >= 4 && static_cast<unsigned char>(b[0]) == 0xFF && static_cast<unsigned char>(b[1]) == 0xD8) return jpeg_size(b, out);
  if (b.size() >= 10 && (b.substr(0, 6) == "GIF87a" || b.substr(0, 6) == "GIF89a")) {
    *out = {le16(b, 6), le16(b, 8)};
    return true;
  }
  if (b.size() >= 26 && b.substr(0, 2) == "BM") {
    const std::int32_t w = le32(b, 18), h = le32(b, 22);  // height < 0: rows stored top-down
    *out = {w < 0 ? -std::int64_t{w} : w, h < 0 ? -std::int64_t{h} : h};
    return true;
  }
  return false;
}

Status room_for_image(std::size_t held, const std::string& field, const ImageLimits& limits) {
  if (limits.max_images <= 0) {
    return Status(ErrorCode::kNotSupported, "'" + field + "': images are not supported: this server's model has no "
                  "vision projector (umad --mmproj)", field);
  }
  if (held >= static_cast<std::size_t>(limits.max_images)) {
    return Status(ErrorCode::kBadRequest, "'" + field + "' holds more than " + std::to_string(limits.max_images) + " images", field);
  }
  return Status::Ok();
}

Status image_from_base64(std::string_view text, const std::string& field, const ImageLimits& limits, std::string* bytes) {
  if (text.size() / 4 * 3 > limits.max_bytes + 3) {
    return too_big(field, "an image is larger than " + std::to_string(limits.max_bytes >> 20) + " MiB");
  }
  if (!base64_decode(text, bytes)) return Status(ErrorCode::kBadRequest, "'" + field + "' is not valid base64", field);
  ImageSize size;
  if (!sniff_image_size(*bytes, &size)) {
    return Status(ErrorCode::kBadRequest, "'" + field + "' is not a PNG, JPEG, GIF or BMP image", field);
  }
  if (size.width <= 0 || size.height <= 0) return Status(ErrorCode::kBadRequest, "'" + field + "' has an empty image", field);
  // Each side first: two 32-bit sides multiplied could overflow.
  if (size.width > limits.max_pixels || size.height > limits.max_pixels || size.width * size.height > limits.max_pixels) {
    return too_big(field, "an image of " + std::to_string(size.width) + "x" + std::to_string(size.height) +
                              " pixels is over the limit of " + std::to_string(limits.max_pixels));
  }
  return Status::Ok();
}

Status image_from_url(std::string_view url, const std::string& field, const ImageLimits& limits, std::string* bytes) {
  if (url.substr(0, 5) != "data:") {
    return Status(ErrorCode::kNotSupported, "'" + field + "': images are taken as data URLs (data:image/png;base64,...); "
                  "this server fetches nothing from the network", field);
  }
  const std::size_t comma = url.find(',');
  if (comma == std::string_view::npos) return Status(ErrorCode::kBadRequest, "'" + field + "' is a data URL without data", field);
  const std::string_view meta = url.substr(5, comma - 5);
  if (meta.size() < 7 || meta.substr(meta.size() - 7) != ";base64") {
    return Status(ErrorCode::kBadRequest, "'" + field + "' must be a base64 data URL (data:image/png;base64,...)", field);
  }
  return image_from_base64(url.substr(comma + 1), field, limits, bytes);
}

}  // namespace uma
