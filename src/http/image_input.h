// Images as the APIs carry them, checked at the edge before anything is queued: data URLs
// (OpenAI's image_url, Responses' input_image), bare base64 (Ollama's images, Anthropic's base64
// source, llama-server's multimodal_data). Nothing is fetched: a URL that is not a data URL is
// refused. The bytes must be an image format the projector's decoder reads (PNG, JPEG, GIF, BMP)
// and its header's dimensions within `max_pixels`, read before anything is decoded, so a small
// file that would decode to gigabytes is refused first.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"
#include "serve/request.h"  // kImageMarker

namespace uma {

struct ImageLimits {
  std::int32_t max_images = 16;                   // per request; 0: no images (no vision projector)
  std::int64_t max_pixels = 33'554'432;           // width x height: 32 Mpixel
  std::size_t max_bytes = std::size_t{20} << 20;  // encoded, per image
};

struct ImageSize {
  std::int64_t width = 0, height = 0;
};
// The dimensions in an image's header; false when the format is not one of PNG, JPEG, GIF, BMP.
bool sniff_image_size(std::string_view bytes, ImageSize* out);

// Whether one more image fits a request that holds `held`: kNotSupported without a projector
// (max_images 0), kBadRequest past the limit.
Status room_for_image(std::size_t held, const std::string& field, const ImageLimits& limits);
// `field` names the JSON field in errors. Bad input: kBadRequest; a remote URL: kNotSupported.
Status image_from_url(std::string_view url, const std::string& field, const ImageLimits& limits, std::string* bytes);
Status image_from_base64(std::string_view text, const std::string& field, const ImageLimits& limits, std::string* bytes);

}  // namespace uma
