// Who may call an HTTP server here (umad's API, the agent's, uma-gw), checked in one place before
// any handler sees a request:
// - a key (`api_key`, read by the caller from a file): every path but `open_paths` needs
//   "Authorization: Bearer KEY" (OpenAI's clients) or "x-api-key: KEY" (Anthropic's), compared in
//   constant time in the key's length, so a wrong key's matching prefix is not told by timing;
// - CORS (`cors_origin`: "*" or one origin browsers may call from): the headers every answer to a
//   request from that origin carries, and a preflight (OPTIONS) answered 204 before any key is
//   asked for (a browser never sends one with it).
// Pure; no state.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "httpkit/http_wire.h"

namespace uma {

struct AccessPolicy {
  std::string api_key;      // empty: no key required
  std::string cors_origin;  // empty: no CORS headers, OPTIONS is not special
  std::vector<std::string> open_paths = {"/health"};  // served without the key
};

inline bool key_matches(std::string_view given, std::string_view key) {
  unsigned char diff = given.size() == key.size() ? 0 : 1;
  for (std::size_t i = 0; i < key.size(); ++i) diff |= static_cast<unsigned char>(i < given.size() ? given[i] ^ key[i] : 1);
  return diff == 0;
}

inline bool bearer_authorized(std::string_view authorization, std::string_view key) {
  constexpr std::string_view kBearer = "Bearer ";
  if (authorization.substr(0, kBearer.size()) != kBearer) return false;
  return key_matches(authorization.substr(kBearer.size()), key);
}

// The headers an answer to a request from `origin` carries when `allowed` lets that origin in, or "".
inline std::string cors_headers(std::string_view allowed, std::string_view origin) {
  if (allowed.empty() || origin.empty() || (allowed != "*" && allowed != origin)) return {};
  return "Access-Control-Allow-Origin: " + std::string(allowed == "*" ? std::string_view("*") : origin) +
         "\r\nVary: Origin\r\nAccess-Control-Allow-Methods: GET, POST, OPTIONS\r\n"
         "Access-Control-Allow-Headers: Authorization, Content-Type, x-api-key, anthropic-version, anthropic-beta, "
         "OpenAI-Organization, OpenAI-Project\r\nAccess-Control-Max-Age: 600\r\n";
}

struct AccessCheck {
  enum class Verdict { kPass, kPreflight, kUnauthorized };
  Verdict verdict = Verdict::kPass;
  std::string cors;  // headers for every answer to the request ("" when none)
};

inline AccessCheck check_access(const AccessPolicy& policy, const HttpRequest& req) {
  AccessCheck out;
  out.cors = cors_headers(policy.cors_origin, req.header("Origin"));
  if (req.method == boost::beast::http::verb::options && !policy.cors_origin.empty()) {
    out.verdict = AccessCheck::Verdict::kPreflight;
    return out;
  }
  if (policy.api_key.empty()) return out;
  for (const std::string& p : policy.open_paths) {
    if (p == req.path) return out;
  }
  bool has_auth = false, has_x = false;
  const std::string_view auth = req.header("Authorization", &has_auth), x = req.header("x-api-key", &has_x);
  const bool given = (has_auth && bearer_authorized(auth, policy.api_key)) || (has_x && key_matches(x, policy.api_key));
  if (!given) out.verdict = AccessCheck::Verdict::kUnauthorized;
  return out;
}

inline constexpr std::string_view kKeyRequired = "a valid key is required: Authorization: Bearer KEY (or x-api-key: KEY)";

}  // namespace uma
