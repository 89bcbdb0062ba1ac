#include "webui/webui.h"

#include <cstddef>

namespace uma::webui {

extern const unsigned char index_html[];
extern const std::size_t index_html_size;

std::optional<Asset> asset(std::string_view path) {
  if (path == "/" || path == "/index.html") {
    return Asset{"text/html; charset=utf-8", {reinterpret_cast<const char*>(index_html), index_html_size}};
  }
  return std::nullopt;
}

}  // namespace uma::webui
