// http_chunk: one HTTP/1.1 chunk of a chunked body (size line, data, CRLF), the one encoding every
// streamed reply uses (umad's SSE, the agent's KV-event stream, the gateway's relay). Pure.
#pragma once

#include <cstdio>
#include <string>
#include <string_view>

namespace uma {

inline std::string http_chunk(std::string_view data) {
  char size[24];
  const int n = std::snprintf(size, sizeof size, "%zx\r\n", data.size());
  std::string out(size, static_cast<std::size_t>(n));
  out.append(data);
  out += "\r\n";
  return out;
}

}  // namespace uma
