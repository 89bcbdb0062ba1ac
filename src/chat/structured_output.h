// Structured output: a JSON schema turned into the GBNF grammar llama.cpp's grammar sampler
// enforces, by llama.cpp's own converter (common's json_schema_to_grammar, the one llama-server
// uses), so what umad constrains to is what the schema says, property order and all.
//
// Front ends call it at the protocol edge (through an injected function: http/ and ipc/ know no
// llama.cpp), so a schema it cannot convert is a 400 naming the request's field, before anything
// runs. Pure and thread-safe (no state).
#pragma once

#include <string>

#include "common/status.h"

namespace uma {

// `schema_json`: a JSON schema (text). On success *gbnf holds a grammar whose root rule matches
// exactly the JSON documents the schema allows (with bounded whitespace). kBadRequest when the
// text is not JSON, not a schema, or uses what the converter does not support.
Status json_schema_to_gbnf(const std::string& schema_json, std::string* gbnf);

// Any JSON object (OpenAI's response_format {"type": "json_object"}).
inline constexpr const char* kAnyJsonObjectSchema = R"({"type":"object"})";

}  // namespace uma
