// The one mapping of the project's errors (common/status.h) onto HTTP: a status code, and a body
// in OpenAI's error shape ({"error": {message, type, param, code}}), which every HTTP server here
// answers with (Anthropic's and the Responses API's writers re-shape it). Pure.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"

namespace uma {

// `param`: the request field at fault (Status::param()); empty gives null.
std::string http_error_body(ErrorCode code, std::string_view message, std::string_view param = {});
inline std::string http_error_body(const Status& st) { return http_error_body(st.code(), st.message(), st.param()); }
unsigned http_status(ErrorCode code);

}  // namespace uma
