// StopFilter: ends generation at any of a request's stop strings, matching across token
// boundaries, and never lets a stop string (or the start of one) reach the client.
//
// Text is pushed as it is detokenized (complete UTF-8). The filter holds back the longest tail that
// could still grow into a stop string; everything before it is safe to emit. When a stop string
// completes, the text before it is released and the rest is dropped. Held text starts where a stop
// string starts, so what is released always ends on a code point boundary.
// Not thread-safe; one per request.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace uma {

class StopFilter {
 public:
  explicit StopFilter(std::vector<std::string> stops = {});

  // Returns the text now safe to emit; sets *matched when a stop string completed (then the
  // request is over and later pushes are not expected).
  std::string push(std::string_view text, bool* matched);
  // End of generation for another reason: the held tail is ordinary text after all.
  std::string flush();
  bool empty() const { return stops_.empty(); }
  // The stop string that ended the text (once push() said so).
  const std::string& matched() const { return matched_; }

 private:
  std::vector<std::string> stops_;
  std::string matched_;
  std::string held_;
};

}  // namespace uma
