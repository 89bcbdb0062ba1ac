// The bridge to llama.cpp's JSON-schema converter; only this file (and chat_templates.cc) sees
// common's headers.
#include "chat/structured_output.h"

#include <exception>

#include "json-schema-to-grammar.h"
#include "json.h"

namespace uma {

Status json_schema_to_gbnf(const std::string& schema_json, std::string* gbnf) {
  try {
    const common_json schema = common_json::parse(schema_json);
    if (!schema.is_object()) return Status(ErrorCode::kBadRequest, "a JSON schema must be a JSON object");
    *gbnf = json_schema_to_grammar(schema);
  } catch (const std::exception& e) {
    return Status(ErrorCode::kBadRequest, std::string("the JSON schema cannot be turned into a grammar: ") + e.what());
  }
  if (gbnf->empty()) return Status(ErrorCode::kBadRequest, "the JSON schema gives an empty grammar");
  return Status::Ok();
}

}  // namespace uma
