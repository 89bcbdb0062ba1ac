// The newline protocol's output side: the one place where an ErrorCode becomes the
// protocol's error text, and where generated text is made safe for a line-framed stream.
//
// A reply is the generated text followed by '\n'. Because the reply itself ends at '\n', the text
// is escaped: '\n' -> "\\n", '\r' -> "\\r", '\\' -> "\\\\" (docs/PROTOCOL.md). Errors are one
// line, "error: <text>\n"; an error after part of a reply first ends that reply's line.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"

namespace uma {

std::string_view newline_error_text(ErrorCode code);
void append_escaped(std::string& out, std::string_view text);
// Reverses append_escaped (for clients and tests).
std::string unescape_reply(std::string_view line);

}  // namespace uma
