// to_json_text: the one way umad turns a JSON value into bytes for a client.
//
// nlohmann's dump() throws type_error 316 on a string that is not valid UTF-8. What we emit may
// carry bytes a client sent (an HTTP path, a header) or bytes a model produced, so emitting must
// never throw: invalid UTF-8 becomes U+FFFD. Header-only; callers link nlohmann_json themselves.
#pragma once

#include <string>

namespace uma {

template <typename Json>
std::string to_json_text(const Json& j) {
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace uma
