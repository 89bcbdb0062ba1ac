// UTF-8 helpers shared by the protocol edge (validation) and detokenization (streaming assembly).
//
// Utf8Stream turns an arbitrary byte stream (token pieces may split a code point, or be bytes that
// never form valid UTF-8) into text that is always valid UTF-8 and never ends inside a code point:
// complete code points pass through, an incomplete tail is held until the next push, and bytes that
// cannot be part of valid UTF-8 become U+FFFD. Not thread-safe; one per stream.
#pragma once

#include <string>
#include <string_view>

namespace uma {

// Strict validation (RFC 3629): no overlongs, no surrogates, nothing above U+10FFFF.
bool is_valid_utf8(std::string_view s);

class Utf8Stream {
 public:
  // Appends bytes; returns the text that is now complete (possibly empty).
  std::string push(std::string_view bytes);
  // Ends the stream: a held incomplete tail becomes U+FFFD.
  std::string finish();
  bool holding() const { return !pending_.empty(); }

 private:
  std::string pending_;
};

}  // namespace uma
