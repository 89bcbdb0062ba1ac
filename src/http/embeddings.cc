#include "http/embeddings.h"

#include "common/json_fields.h"

#include <nlohmann/json.hpp>


#include "common/base64.h"
#include "common/json_text.h"

namespace uma::embeddings {
namespace {

using json = nlohmann::ordered_json;

Status bad(const std::string& field, const std::string& what) {
  return Status(ErrorCode::kBadRequest, "'" + field + "' " + what, field);
}

std::string base64_of(const std::vector<float>& v) {
  // Little-endian floats on every machine umad builds for.
  return base64_encode(std::string_view(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float)));
}

}  // namespace

Status parse(std::string_view body, std::size_t max_bytes, bool strict, Request* out) {
  const json j = json::parse(body, nullptr, false);
  if (j.is_discarded()) return Status(ErrorCode::kInvalidJson, "the request body is not valid JSON");
  if (!j.is_object()) return Status(ErrorCode::kBadRequest, "the request body must be a JSON object");
  *out = Request{};
  std::size_t bytes = 0;
  const char* what = "must be a string, token ids, or an array of either";
  auto one = [&](const json& e) -> Status {
    PromptInput p;
    if (e.is_string()) {
      p.text = e.get<std::string>();
      if (p.text.empty()) return bad("input", "must not hold empty strings");
      if (p.text.find('\0') != std::string::npos) return Status(ErrorCode::kContainsNul, "'input' must not contain NUL", "input");
      bytes += p.text.size();
    } else if (e.is_array() && !e.empty()) {
      if (!json_token_ids(e, &p.tokens)) return bad("input", what);
      bytes += 4 * p.tokens.size();
    } else {
      return bad("input", what);
    }
    out->inputs.push_back(std::move(p));
    return Status::Ok();
  };
  for (const auto& [key, v] : j.items()) {
    if (v.is_null()) continue;
    if (key == "input") {
      Status st;
      if (v.is_string() || (v.is_array() && !v.empty() && v[0].is_number())) {
        st = one(v);
      } else if (v.is_array() && !v.empty() && v.size() <= kMaxInputs) {
        for (const json& e : v) {
          if (!(st = one(e)).ok()) break;
        }
      } else {
        st = bad("input", std::string(what) + " (1 to 2048 inputs)");
      }
      if (!st.ok()) return st;
    } else if (key == "model") {
      if (!v.is_string()) return bad("model", "must be a string");
      out->model = v.get<std::string>();
    } else if (key == "encoding_format") {
      if (v != "float" && v != "base64") return bad("encoding_format", "must be float or base64");
      out->base64 = v == "base64";
    } else if (key == "dimensions") {
      if (!v.is_number_integer() || v.get<std::int64_t>() < 1) return bad("dimensions", "must be a positive integer");
      out->dimensions = v.get<std::int64_t>();
    } else if (key == "user") {
      if (!v.is_string()) return bad("user", "must be a string");
    } else if (strict) {
      return bad(key, "is not a field of /v1/embeddings that umad knows");
    } else {
      out->ignored.push_back(key);
    }
  }
  if (out->inputs.empty()) return bad("input", "is required");
  if (bytes > max_bytes) {
    return Status(ErrorCode::kPromptTooLarge, "input of " + std::to_string(bytes) + " bytes is over the limit of " + std::to_string(max_bytes));
  }
  return Status::Ok();
}

std::string response(const std::string& model, const std::vector<std::vector<float>>& vectors, bool base64,
                     std::int32_t prompt_tokens) {
  json data = json::array();
  for (std::size_t i = 0; i < vectors.size(); ++i) {
    data.push_back({{"object", "embedding"}, {"index", i},
                    {"embedding", base64 ? json(base64_of(vectors[i])) : json(vectors[i])}});
  }
  return to_json_text(json{{"object", "list"}, {"data", data}, {"model", model.empty() ? "umad" : model},
                           {"usage", {{"prompt_tokens", prompt_tokens}, {"total_tokens", prompt_tokens}}}});
}

}  // namespace uma::embeddings
