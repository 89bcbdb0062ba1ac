// OpenAI's embeddings API at the HTTP edge (POST /v1/embeddings): `input` as a string, token ids,
// or an array of either (up to kMaxInputs), `encoding_format` float or base64 (little-endian
// float32), `dimensions` only when it equals the model's; the answer's JSON. Pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "serve/request.h"

namespace uma::embeddings {

inline constexpr std::size_t kMaxInputs = 2048;  // OpenAI's limit

struct Request {
  std::string model;
  std::vector<PromptInput> inputs;
  bool base64 = false;
  std::optional<std::int64_t> dimensions;
  std::vector<std::string> ignored;  // fields no one defined
};

// kInvalidJson / kBadRequest naming the field; kPromptTooLarge past max_bytes of text in all.
Status parse(std::string_view body, std::size_t max_bytes, bool strict, Request* out);
std::string response(const std::string& model, const std::vector<std::vector<float>>& vectors, bool base64,
                     std::int32_t prompt_tokens);

}  // namespace uma::embeddings
