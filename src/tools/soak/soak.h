// uma-soak's shared vocabulary: the actions a client takes, their outcomes, the driver's settings,
// the oracle's expectations and the tally every client reports into (docs/BENCHMARKS.md, "Soak").
//
// Thread-safety: Settings is read-only once the clients start. Expectations and Tally are shared
// by all client threads and serialise their own state with a mutex. Ownership: soak_main owns one
// of each for the whole run; clients hold references.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "tools/oracle/oracle.h"

namespace uma::soak {

using Clock = std::chrono::steady_clock;

enum class Front : std::uint8_t { kUds, kHttp };
inline constexpr std::size_t kFronts = 2;

enum class Action : std::uint8_t {
  kStream,      // a streamed completion, checked exactly against the oracle
  kFull,        // a non-streamed completion, checked exactly
  kCancel,      // UDS: the cancel event mid-stream; HTTP: half-close mid-stream (the client is gone)
  kDisconnect,  // close the socket mid-stream (HTTP: sometimes with a reset)
  kSlow,        // a reader that takes a few bytes and pauses: exact text, or dropped by the TX cap
  kMalformed,   // one case of the malformed-input table: its typed error
  kProbe,       // metrics / health / models
};
inline constexpr std::size_t kActions = 7;

enum class Outcome : std::uint8_t {
  kExact,         // the whole text, exactly the oracle's, with the right finish reason
  kCancelled,     // ended early as asked; every byte received was the oracle's prefix
  kRaced,         // the cancel or close came after the end: the whole text, exact
  kDisconnected,  // we closed mid-stream; what arrived before was the oracle's prefix
  kDropped,       // a slow reader the server dropped (TX cap); what arrived was the oracle's prefix
  kTypedError,    // a malformed request got its typed error
  kProbeOk,
  kUnexpected,
};
inline constexpr std::size_t kOutcomes = 8;

std::string_view name(Front f);
std::string_view name(Action a);
std::string_view name(Outcome o);

// What the driver knows about the daemon under test (the same values umad was started with).
struct Settings {
  std::string socket_path;
  std::string http_host = "127.0.0.1";
  int http_port = 0;                     // 0: every client uses the Unix socket
  std::size_t max_prompt_bytes = 65536;  // umad --max-prompt-bytes
  std::size_t max_frame_bytes = 1 << 20; // umad --max-frame-bytes
  std::size_t http_max_body_bytes = 1 << 20;
  int n_ctx = 4096;
  int max_tokens_cap = 512;              // umad --max-tokens
  bool chat = true;                      // umad serves chat (--chat-template chatml)
  std::chrono::milliseconds timeout{120000};  // per read: longer is an unexpected stall
  const std::atomic<bool>* stop = nullptr;    // the run is over: slow readers leave at once
};

// The oracle's answer for one prompt and max_tokens.
struct Expected {
  std::string text;
  std::string reason;       // "length" or "stop" (an end-of-generation token came first)
  int prompt_tokens = 0;
  int completion_tokens = 0;
};

class Expectations {
 public:
  explicit Expectations(const std::string& model_path) : oracle_(model_path) {}
  Expected completion(const std::string& prompt, int max_tokens) const;
  // The prompt chatml renders for (system, user), with the assistant's turn opened.
  static std::string render_chat(const std::string& system, const std::string& user);

 private:
  mutable std::mutex mu_;
  Oracle oracle_;
};

// Counts by front end x action x outcome, tokens received in exact streams, and the first
// unexpected errors in full.
class Tally {
 public:
  void record(Front f, Action a, Outcome o, std::int64_t tokens = 0);
  void unexpected(Front f, Action a, const std::string& request, const std::string& detail);
  std::int64_t count(Front f, Action a, Outcome o) const;
  std::int64_t total(Outcome o) const;
  std::int64_t total_requests() const;
  std::int64_t tokens() const { return tokens_; }
  // Unexpected errors that were a text differing from the oracle's (a stream not exact).
  std::int64_t mismatches() const { return mismatches_; }
  std::vector<std::string> first_unexpected() const;

  static constexpr std::size_t kKeep = 20;

 private:
  mutable std::mutex mu_;
  std::array<std::array<std::array<std::int64_t, kOutcomes>, kActions>, kFronts> counts_{};
  std::atomic<std::int64_t> tokens_{0};
  std::atomic<std::int64_t> mismatches_{0};
  std::vector<std::string> first_;
};

// "got" against the oracle's "want": "" when equal, else where and how they differ.
std::string diff(const std::string& want, const std::string& got);
// JSON-escaped, cut to about `max` bytes, for error messages.
std::string quote(std::string_view s, std::size_t max = 120);

}  // namespace uma::soak
