// bearer_authorized: whether a request's Authorization header carries `key` as a bearer token
// ("Authorization: Bearer KEY", as OpenAI's clients send it), compared in constant time in the
// key's length, so a wrong key's matching prefix is not told by timing. key_matches: the same for
// a key given bare (Anthropic's `x-api-key: KEY`). Every HTTP server here
// (umad's OpenAI API, the agent's management API) checks its key through this one function.
// Pure; no state.
#pragma once

#include <string_view>

namespace uma {

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

// A client's request carries `key` in either header (each null when absent): what umad's API and
// uma-gw check.
inline bool client_authorized(const std::string_view* authorization, const std::string_view* x_api_key, std::string_view key) {
  return (authorization != nullptr && bearer_authorized(*authorization, key)) ||
         (x_api_key != nullptr && key_matches(*x_api_key, key));
}

}  // namespace uma
