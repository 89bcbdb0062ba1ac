// Drafter: a small model proposing tokens for speculative decoding (sched/speculation.h), as the
// scheduler sees it: through this interface only, so that a fake can stand in for it in tests.
// runtime/draft_model.h is llama.cpp's.
//
// Contract:
// - Single-threaded: every call comes from the compute thread, like the Decoder's.
// - A draft sequence is named by the target's sequence id. What it holds is the drafter's
//   business: draft() compares the tokens it is given with what it fed that id before and feeds
//   only what differs (a new request under a reused id, the tokens a verification accepted), so
//   the scheduler never reports rollbacks. forget() only frees memory early.
// - draft() fills each job's `out` with up to k tokens proposed after the job's last token
//   (fewer at the draft's end of generation); on error the outs are empty and the drafter holds
//   nothing (the next call starts over).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"
#include "runtime/decoder.h"

namespace uma {

struct DraftJob {
  std::int32_t seq = 0;
  std::span<const Token> tokens;      // the sequence so far: prompt and output
  std::int32_t k = 0;                 // tokens to propose after tokens.back()
  std::vector<Token>* out = nullptr;  // receives them
};

class Drafter {
 public:
  virtual ~Drafter() = default;
  // Every job of a tick in one call: the sequences' catch-up together, then k steps of one token
  // each (every job still drafting shares a step).
  virtual Status draft(std::span<const DraftJob> jobs) = 0;
  virtual void forget(std::int32_t seq) = 0;
  // Measured milliseconds of one drafting step of `rows` jobs together (0 until measured): what
  // each drafted token costs the tick, over and above its verification.
  virtual double step_ms(std::size_t rows) const = 0;
  // Measured milliseconds a draft() call of `jobs` jobs costs beyond its steps (the catch-up
  // decode; on a GPU the graphs built for a batch of a new shape): a tick with model drafts pays
  // it once. Both are kept by the number's power-of-two bucket (common/bucketed_ewma.h).
  virtual double call_ms(std::size_t jobs) const {
    (void)jobs;
    return 0.0;
  }
  // Tokens a draft() for sequence `seq` would feed before its first step: where what it holds
  // stops matching `tokens` (a new request's whole prompt; since its last call, what was accepted
  // or generated meanwhile). 0 where not kept.
  virtual std::size_t lag(std::int32_t seq, std::span<const Token> tokens) const {
    (void)seq, (void)tokens;
    return 0;
  }
  // Predicted ms of feeding `tokens` tokens of catch-up (0: not known): a per-token rate measured
  // at start, then from the calls that fed prompts.
  virtual double catch_up_ms(std::size_t tokens) const {
    (void)tokens;
    return 0.0;
  }
  // Moves both estimates for `jobs` jobs towards 0 by `factor`: the scheduler calls it when they
  // declined a plan, since only a draft refreshes them (a cold first sample would decline for good).
  virtual void decay_costs(std::size_t jobs, double factor) { (void)jobs, (void)factor; }
  // The host threads its decodes compute with, from its next call (Decoder::set_threads).
  virtual void set_threads(std::int32_t n) { (void)n; }
};

}  // namespace uma
