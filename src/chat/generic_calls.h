// Generic tool calls: when a chat template cannot express calls (a plain chatml one has no tool
// syntax, so llama.cpp's parser for it reads content only) and the request requires one
// (tool_choice "required" or a named function), umad falls back to a generic JSON call, as
// llama-server's generic format does: the tools are described in a system message, a grammar holds
// the output to {"name": ..., "arguments": {...}} for one of the allowed tools (their schemas
// enforced), and the parser reads it back as the reply's call. One call per reply.
// Pure functions; the parser as chat_types.h's contract.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "serve/chat_types.h"

namespace uma {

// The system text that describes `tools` and the reply's format.
std::string generic_tools_prompt(const std::vector<ChatTool>& tools);
// The JSON schema of one call to `forced` (empty: to any of `tools`).
std::string generic_call_schema(const std::vector<ChatTool>& tools, const std::string& forced);
// Reads the whole output at its end as one call (text that is not one is content).
std::unique_ptr<ChatOutputParser> generic_call_parser();

}  // namespace uma
