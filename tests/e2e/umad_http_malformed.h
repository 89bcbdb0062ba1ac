// The malformed-HTTP table (umad_http_malformed_test.cc runs it): what a row sends and what a
// well-behaved server answers. Split from the runner so each file holds one idea.
#pragma once

#include <set>
#include <string>
#include <vector>

namespace uma::test::malformed {

// What the client does once its bytes are sent.
enum class After { kNothing, kHalfClose, kClose };
// The connection after the expected replies: still in sync (a GET /health on it gets 200), closed
// by the server, or either.
enum class End { kOpen, kClosed, kAny };

struct Expected {
  std::set<int> status;   // acceptable status codes
  std::string text{};     // a 200 completion must carry exactly this text ("": not checked)
  bool optional = false;  // the server may close instead of sending it
  std::string contains{};  // the (de-chunked) body must contain this
};

struct Row {
  std::string name;
  std::vector<std::string> pieces;  // sent one after the other
  std::vector<Expected> replies;
  End end = End::kOpen;
  After after = After::kNothing;
};

inline Expected status(std::set<int> s) { return Expected{std::move(s)}; }
inline Expected ok(std::string text = {}) { return Expected{{200}, std::move(text)}; }
inline Expected maybe(std::set<int> s) { return Expected{std::move(s), {}, true}; }

constexpr int kTimeoutSec = 1;      // --http-timeout-sec
constexpr int kMaxBodyKib = 256;    // --http-max-body-kib
constexpr int kMaxPromptBytes = 8192;
constexpr int kNCtx = 1024;
constexpr int kMaxTokens = 16;

// Every row, in the order they run.
std::vector<Row> table();

}  // namespace uma::test::malformed
