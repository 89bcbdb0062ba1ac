// CORS for the HTTP servers browsers call (umad's API, uma-gw): the headers an answer to a request
// from `origin` carries when `allowed` ("*" or one origin) lets that origin in, or "". A browser's
// preflight (OPTIONS) is answered 204 with them, before any key is asked for (it never carries one).
// Pure.
#pragma once

#include <string>
#include <string_view>

namespace uma {

inline std::string cors_headers(std::string_view allowed, std::string_view origin) {
  if (allowed.empty() || origin.empty() || (allowed != "*" && allowed != origin)) return {};
  return "Access-Control-Allow-Origin: " + std::string(allowed == "*" ? std::string_view("*") : origin) +
         "\r\nVary: Origin\r\nAccess-Control-Allow-Methods: GET, POST, OPTIONS\r\n"
         "Access-Control-Allow-Headers: Authorization, Content-Type, x-api-key, anthropic-version, anthropic-beta, "
         "OpenAI-Organization, OpenAI-Project\r\nAccess-Control-Max-Age: 600\r\n";
}

}  // namespace uma
