// Base64 (RFC 4648, the standard alphabet with '=' padding), as JSON APIs carry bytes: embeddings
// out, images in.
#pragma once

#include <string>
#include <string_view>

namespace uma {

std::string base64_encode(std::string_view bytes);
// False on a character outside the alphabet or a length that is not whole quads; ASCII whitespace
// (line breaks of a wrapped encoding) is skipped, and padding is optional.
bool base64_decode(std::string_view text, std::string* out);

}  // namespace uma
