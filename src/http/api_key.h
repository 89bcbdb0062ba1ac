// bearer_authorized: whether a request's Authorization header carries `key` as a bearer token
// ("Authorization: Bearer KEY", as OpenAI's clients send it), compared in constant time in the
// key's length, so a wrong key's matching prefix is not told by timing. Every HTTP server here
// (umad's OpenAI API, the agent's management API) checks its key through this one function.
// Pure; no state.
#pragma once

#include <string_view>

namespace uma {

inline bool bearer_authorized(std::string_view authorization, std::string_view key) {
  constexpr std::string_view kBearer = "Bearer ";
  if (authorization.substr(0, kBearer.size()) != kBearer) return false;
  const std::string_view given = authorization.substr(kBearer.size());
  unsigned char diff = given.size() == key.size() ? 0 : 1;
  for (std::size_t i = 0; i < key.size(); ++i) diff |= static_cast<unsigned char>(i < given.size() ? given[i] ^ key[i] : 1);
  return diff == 0;
}

}  // namespace uma
