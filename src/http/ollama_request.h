// Ollama's request bodies as the OpenAI bodies umad runs (ollama_api.h says what maps to what).
// Pure functions; kInvalidJson, kBadRequest naming the field, or kNotSupported (images, a template
// override) on what umad cannot take. Fields that change nothing here go to *ignored.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace uma::ollama {

// POST /api/chat -> an OpenAI chat body.
Status chat_body(std::string_view body, std::string* out, std::vector<std::string>* ignored);

// POST /api/generate -> an OpenAI chat body (the model's template around system and prompt), or
// with raw a completions body (the prompt as it is). An empty prompt only asks for the model.
struct Generate {
  std::string model;
  bool load_only = false;
  bool raw = false;
  std::string prompt;
  std::string suffix;  // fill in the middle: the text after the gap (the route builds the FIM prompt)
  std::string body;
};
Status generate_body(std::string_view body, Generate* out, std::vector<std::string>* ignored);

// POST /api/embed (input: a string or strings) and the older /api/embeddings (prompt: a string)
// -> an OpenAI embeddings body.
Status embed_body(std::string_view body, bool legacy, std::string* out, std::vector<std::string>* ignored);

}  // namespace uma::ollama
