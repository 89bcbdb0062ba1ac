// One soak client's iterations: pick an action at random (seeded), carry it out over the Unix
// socket (framed JSON) or the OpenAI HTTP API, check what came back against the oracle, and
// record the outcome in the shared Tally. Every outcome that is not expected for its action is an
// unexpected error with a one-line explanation (Tally::unexpected).
//
// Thread-safety: a ClientState belongs to one thread; the Settings, Expectations and Tally it
// references are shared (read-only / internally locked). Ownership: references only.
#pragma once

#include <cstdint>
#include <random>
#include <string>

#include "net/blocking_socket.h"
#include "tools/bench/workload.h"
#include "tools/soak/soak.h"

namespace uma::soak {

struct ClientState {
  ClientState(int index, Front front, std::uint64_t seed, const Settings& settings, const Expectations& expect,
              Tally& tally)
      : index(index), front(front), settings(settings), expect(expect), tally(tally), rng(seed), words(seed ^ 0x5eed) {}

  int index;
  Front front;
  const Settings& settings;
  const Expectations& expect;
  Tally& tally;
  std::mt19937_64 rng;
  bench::PromptMaker words;
  std::uint64_t iteration = 0;
  std::uint64_t sub = 0;  // requests within one iteration

  std::string next_id() { return "c" + std::to_string(index) + "-" + std::to_string(iteration) + "." + std::to_string(sub++); }
  int uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); }
  bool chance(double p) { return std::bernoulli_distribution(p)(rng); }
  // Random words; a quarter of them after one of three long shared preambles (the prefix cache).
  std::string prompt();
  std::string preamble();
  Clock::time_point deadline() const { return Clock::now() + settings.timeout; }
  void fail(Action a, const std::string& request, const std::string& detail) { tally.unexpected(front, a, request, detail); }
};

// The action for the next iteration (fixed weights, see actions.cc).
Action pick_action(ClientState& c);
void run_uds(ClientState& c, Action a);
void run_http(ClientState& c, Action a);

// A slow reader's pace (trickling small reads, or stalling after its first bytes) and its reply's
// length: long enough that a reader slower than the stream can outgrow the server's TX cap plus
// the kernel's socket buffers, and be dropped.
uma::Pacing slow_pacing(ClientState& c);
int slow_tokens(ClientState& c);

// A prompt of more tokens than the context holds, or "" when --max-prompt-bytes cannot carry one.
std::string over_context_prompt(const Settings& s);
// "true" when `got` is a prefix of `want` (what a stream ended early must be).
inline bool is_prefix(const std::string& want, const std::string& got) { return want.compare(0, got.size(), got) == 0; }

}  // namespace uma::soak
