// JsonFields: typed reads of a JSON object's fields, each error a kBadRequest Status that names the
// field ("<what>: '<key>' is missing or of the wrong type", detail = the key).
//   string   required unless told otherwise; absent and optional leaves *out as it was.
//   number   absent or null leaves *out as it was; an unsigned T takes only a non-negative integer.
// Header-only, templated on the JSON type; callers link nlohmann_json themselves. Holds a
// reference to the object: lives no longer than it.
#pragma once

#include <string>
#include <string_view>
#include <type_traits>

#include "common/status.h"

namespace uma {

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

 private:
  const Json& j_;
  std::string_view what_;
};

}  // namespace uma
