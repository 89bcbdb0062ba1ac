// Typed reads of JSON values, the one set every reader here uses (requests, events, states):
// - json_integer / json_token_ids: a value as an integer in a range, or as an array of token ids
//   (each a JSON integer, not 1.0 nor a huge unsigned that would wrap), false when it is not;
//   callers word the error in their own API's terms.
// - JsonFields: a JSON object's fields, each error a kBadRequest Status that names the field
//   ("<what>: '<key>' is missing or of the wrong type", detail = the key).
//     string   required unless told otherwise; absent and optional leaves *out as it was.
//     number   absent or null leaves *out as it was; an unsigned T takes only a non-negative integer.
//     integer  absent or null leaves *out as it was; a JSON integer in [lo, hi].
// Header-only, templated on the JSON type; callers link nlohmann_json themselves. JsonFields holds
// a reference to the object: lives no longer than it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "common/status.h"

namespace uma {

template <typename Json>
bool json_integer(const Json& v, std::int64_t lo, std::int64_t hi, std::int64_t* out) {
  if (!v.is_number_integer()) return false;
  if (v.is_number_unsigned() && v.template get<std::uint64_t>() > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
    return false;
  }
  const std::int64_t i = v.template get<std::int64_t>();
  if (i < lo || i > hi) return false;
  *out = i;
  return true;
}

// Appends to *out; ids in [0, max_id], at most max_count of them.
template <typename Json>
bool json_token_ids(const Json& v, std::vector<std::int32_t>* out, std::int64_t max_id = std::numeric_limits<std::int32_t>::max(),
                    std::size_t max_count = std::numeric_limits<std::size_t>::max()) {
  if (!v.is_array() || v.size() > max_count) return false;
  out->reserve(out->size() + v.size());
  for (const Json& t : v) {
    std::int64_t id = 0;
    if (!json_integer(t, 0, max_id, &id)) return false;
    out->push_back(static_cast<std::int32_t>(id));
  }
  return true;
}

template <typename Json>
class JsonFields {
 public:
  JsonFields(const Json& j, std::string_view what) : j_(j), what_(what) {}

  Status bad(std::string_view key) const {
    return Status(ErrorCode::kBadRequest, std::string(what_) + ": '" + std::string(key) + "' is missing or of the wrong type",
                  std::string(key));
  }
  Status string(const char* key, std::string* out, bool required = true) const {
    const auto it = j_.find(key);
    if (it == j_.end()) return required ? bad(key) : Status::Ok();
    if (!it->is_string()) return bad(key);
    *out = it->template get<std::string>();
    return Status::Ok();
  }
  template <typename T>
  Status number(const char* key, T* out) const {
    const auto it = j_.find(key);
    if (it == j_.end() || it->is_null()) return Status::Ok();
    if (!it->is_number() || (std::is_unsigned_v<T> && !it->is_number_unsigned())) return bad(key);
    *out = it->template get<T>();
    return Status::Ok();
  }

  Status integer(const char* key, std::int64_t lo, std::int64_t hi, std::int64_t* out) const {
    const auto it = j_.find(key);
    if (it == j_.end() || it->is_null()) return Status::Ok();
    return json_integer(*it, lo, hi, out) ? Status::Ok() : bad(key);
  }

 private:
  const Json& j_;
  std::string_view what_;
};

}  // namespace uma
