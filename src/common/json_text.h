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

// A string's exact bytes as a JSON array of numbers (a token may be part of a UTF-8 code point,
// which its text, once emitted, shows as U+FFFD).
template <typename Json>
Json byte_array(std::string_view s) {
  Json bytes = Json::array();
  for (unsigned char ch : s) bytes.push_back(ch);
  return bytes;
}

// Log-probability entries (each a `chosen` token and its `top` alternatives) as a JSON array:
// every token as `token(t)` makes it, the alternatives go under `top_key`. One shape, spelled per
// protocol (OpenAI's and the framed JSON's) by `token`.
template <typename Json, typename Entries, typename TokenFn>
Json logprob_entries(const Entries& entries, const char* top_key, TokenFn token) {
  Json all = Json::array();
  for (const auto& e : entries) {
    Json x = token(e.chosen);
    Json top = Json::array();
    for (const auto& t : e.top) top.push_back(token(t));
    x[top_key] = std::move(top);
    all.push_back(std::move(x));
  }
  return all;
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
