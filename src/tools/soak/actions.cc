#include "tools/soak/actions.h"

#include <array>

#include "tools/soak/conn.h"

namespace uma::soak {

std::string ClientState::preamble() {
  // Three fixed preambles of 48 words (seeded, the same in every run): prompts that share them
  // share KV blocks, so the prefix cache's sharing, keeping and eviction run all along.
  static const std::array<std::string, 3> kPreambles = [] {
    std::array<std::string, 3> p;
    for (std::size_t i = 0; i < p.size(); ++i) p[i] = bench::PromptMaker(1000 + i).words(48);
    return p;
  }();
  return kPreambles[static_cast<std::size_t>(uniform(0, 2))];
}

std::string ClientState::prompt() {
  if (chance(0.25)) return preamble() + " " + words.words(uniform(1, 8));
  return words.words(uniform(2, 12));
}

Action pick_action(ClientState& c) {
  // Weights in percent: most iterations are checked completions; the rest are the disturbances.
  // A slow reader lasts tens of seconds (hundreds of tokens, read slowly), others a second or
  // two: at 5% slow readers still take about a third of the clients' time.
  static constexpr std::array<std::pair<Action, int>, kActions> kMix = {{{Action::kStream, 27},
                                                                         {Action::kFull, 15},
                                                                         {Action::kCancel, 12},
                                                                         {Action::kDisconnect, 12},
                                                                         {Action::kSlow, 5},
                                                                         {Action::kMalformed, 20},
                                                                         {Action::kProbe, 9}}};
  int x = c.uniform(0, 99);
  for (const auto& [a, w] : kMix) {
    if (x < w) return a;
    x -= w;
  }
  return Action::kStream;
}

Pacing slow_pacing(ClientState& c) {
  Pacing p;
  p.chunk = static_cast<std::size_t>(c.uniform(16, 256));
  p.stop = c.settings.stop;
  if (c.chance(0.5)) {
    p.pause = std::chrono::milliseconds(c.uniform(5, 60));  // trickle: mostly keeps up
  } else {
    // Stall: a few bytes, then nothing for long enough that a long stream outgrows the socket
    // buffers and the TX cap (dropped), or not (then the whole text, exact).
    p.stall_after = static_cast<std::size_t>(c.uniform(1, 2000));
    p.stall = std::chrono::milliseconds(c.uniform(5000, 40000));
  }
  return p;
}

int slow_tokens(ClientState& c) {
  const int most = std::min(768, c.settings.max_tokens_cap);
  return c.uniform(std::min(256, most), most);
}

std::string over_context_prompt(const Settings& s) {
  // " hello" is one token: n_ctx + 16 of them cannot fit, whatever max_tokens.
  std::string p = Oracle::long_prompt(s.n_ctx + 16, "end");
  return p.size() <= s.max_prompt_bytes ? p : std::string();
}

}  // namespace uma::soak
