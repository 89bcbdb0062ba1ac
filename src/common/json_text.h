// to_json_text: the one way umad turns a JSON value into bytes for a client.
// json_deeper_than: whether JSON text nests arrays/objects deeper than a bound.
//
// nlohmann's dump() throws type_error 316 on a string that is not valid UTF-8. What we emit may
// carry bytes a client sent (an HTTP path, a header) or bytes a model produced, so emitting must
// never throw: invalid UTF-8 becomes U+FFFD. Header-only; callers link nlohmann_json themselves.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace uma {

template <typename Json>
std::string to_json_text(const Json& j) {
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

// nlohmann parses any depth (its parser keeps an explicit stack) but dump() recurses once per
// level, so a client value nested a few hundred thousand deep that we echo back (framed requests'
// metadata) would overflow the I/O thread's stack: no exception, the daemon dies. Checked on the
// raw text before parsing: one pass, brackets inside strings skipped.
inline bool json_deeper_than(std::string_view text, std::size_t max_depth) {
  std::size_t depth = 0;
  bool in_string = false, escaped = false;
  for (const char ch : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (ch == '\\') escaped = true;
      else if (ch == '"') in_string = false;
    } else if (ch == '"') {
      in_string = true;
    } else if (ch == '[' || ch == '{') {
      if (++depth > max_depth) return true;
    } else if ((ch == ']' || ch == '}') && depth > 0) {
      --depth;
    }
  }
  return false;
}

}  // namespace uma
