// The scheduling policy: pure functions of the sessions' states, so each can be read in a minute
// and tested without a model. The Scheduler gathers the inputs and carries out the choices.
//   plan_tick        who decodes and who prefills how much in one tick
//   slo_prefill_budget  how many prompt tokens a tick carries: the worst SLO ratio, minimised
//   gather_window_ms how long to wait for the rest of a burst before a prefill-only tick
//   waiting_before   in which order waiting requests get KV room
//   choose_victims   which sessions to pause: for an interactive request (background ones), or
//                    because the running sessions' KV outgrew the cache
//   choose_park_mode whether a paused session's KV is saved to host memory or dropped
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <utility>
#include <vector>

namespace uma {

// Urgency class. Interactive work is kUrgent; background work is kRelaxed until it has waited its
// bound (--background-max-wait-ms), then kUrgent too, so it cannot starve.
enum class Rank : std::uint8_t { kUrgent = 0, kRelaxed = 1 };

// One active session as plan_tick sees it. Candidates come in round-robin order (the scheduler
// rotates the starting point every tick), so among equals "first" means "its turn".
struct Candidate {
  bool decoding = false;              // has a sampled token waiting to be fed back
  std::int32_t prompt_remaining = 0;  // tokens not yet in KV (prefill sessions)
  bool overdue = false;               // decoding and past its inter-token deadline
  Rank rank = Rank::kUrgent;
  double slack_ms = 0.0;              // prefill: time left to its TTFT target after its remaining prefill
  bool background = false;            // request class (rank may be urgent once it waited its bound)
};

struct PolicyInput {
  std::int32_t budget = 0;       // prefill tokens this tick may carry next to decode (TickBudget)
  std::int32_t capacity = 0;     // hard limit with streams decoding: llama's n_ubatch (one pass)
  std::int32_t min_prefill = 0;  // prefill tokens granted even when decode used the budget
  bool guard_fired_last_tick = false;
  // With nobody decoding: the most background prefill one tick may carry, so that an interactive
  // request arriving meanwhile waits one short tick, not a whole batch (0: capacity).
  std::int32_t background_idle_cap = 0;
  // Per-sequence KV: llama.cpp gives each prompt chunk a pass over the weights of its own (chunks
  // of sequences whose ids are not consecutive never share one), and a pass costs a fixed few ms
  // on a GPU whatever its length. So a prompt is cut only when it cannot fit any tick whole: a
  // chunk is the whole remaining prompt if it fits what is left; a prompt longer than the whole
  // budget takes what is left (at least min_prefill, unless it is the tick's first chunk); one
  // that would fit a later tick whole waits for it, unless nobody decodes (it would stall the
  // streams this tick starts: it takes what is left too).
  bool whole_prompts = false;
  // With nobody decoding: the most one prompt-only tick carries (llama's n_batch; 0: capacity). A
  // burst that goes in at once starts its streams in step, and in a closed loop they stay so.
  std::int32_t idle_capacity = 0;
};

struct TickPlan {
  std::vector<std::size_t> decode;                           // candidate indices, 1 token each
  std::vector<std::pair<std::size_t, std::int32_t>> prefill;  // candidate index, chunk length
  bool guard_fired = false;          // prefill skipped to protect overdue streams
  std::size_t guard_for = 0;         // when it fired: the first overdue candidate
};

// (1) One token for every decoding session (urgent ones first if capacity runs out).
// (2) If a stream is overdue, skip prefill this tick (never two ticks running, so prefill cannot
//     starve).
// (3) Otherwise spend the prefill budget (at least min_prefill) on prefill chunks: urgent before
//     relaxed; least slack first (deadline order) among prompts that can still meet their TTFT
//     target, then shortest remaining first among those that cannot; round-robin among equals. With nobody decoding,
//     the budget is idle_capacity: it exists to protect running streams, and there are none;
//     background work then still takes at most background_idle_cap, to keep arrivals' TTFT short.
TickPlan plan_tick(std::span<const Candidate> sessions, const PolicyInput& in);
// The prefilling candidates in the order (3) serves them: urgent first, then least slack (late ones
// included: the latest first).
std::vector<std::size_t> prefill_order(std::span<const Candidate> sessions);

// A prompt waiting to be prefilled, as slo_prefill_budget sees it (in plan_tick's service order).
struct PromptWait {
  double waited_ms = 0.0;        // since it arrived
  std::int32_t remaining = 0;    // tokens not yet in KV
  double ttft_target_ms = 0.0;   // its target: the SLO on top of its own prefill's predicted time
};
struct SloBudgetInput {
  // Predicted tick time when it carries p prompt tokens next to the decode rows (p = 0: decode only).
  std::function<double(std::int32_t)> tick_ms;
  double stream_waited_ms = 0.0;  // the longest an interactive decoding stream has waited since its last token
  double tbt_target_ms = 0.0;     // the tightest inter-token target among them; 0: none decoding
  std::span<const PromptWait> prompts;
  std::int32_t floor = 1;         // fewest prompt tokens a tick with prefill carries
  std::int32_t capacity = 0;      // most it can carry (n_batch less the decode rows)
  // When every ratio can be kept <= 1: the largest p that keeps them so, not the least worst.
  bool fill_when_met = false;
};
struct SloBudget {
  std::int32_t tokens = 0;     // prompt tokens for this tick
  double stream_ratio = 0.0;   // the streams' predicted gap over their target with that many
  double prompt_ratio = 0.0;   // the worst waiting prompt's predicted TTFT over its target
};
// The rule: a waiting prompt's TTFT counted against its SLO exactly as a running stream's gap
// against its own; picks the prompt tokens p for this tick that minimise
//   max( (stream_waited + tick(p)) / tbt_target,
//        max over prompts i of (waited_i + ceil(cum_i / p) * tick(p)) / ttft_target_i )
// where cum_i is the prompt tokens up to and including i in service order (a prompt finishes after
// those ahead of it, at p tokens a tick). Streams already past their target do not stop prefill
// while a prompt is further past its own; a long prompt is not held to a short prompt's target
// (its own compute is part of it). Ties go to the larger p (fuller ticks: fewer passes over the
// weights). With fill_when_met, every p that meets all targets is a tie: a long prompt then goes
// in in as few gaps as the streams' target allows, done sooner. With no prompt waiting, 0.
SloBudget slo_prefill_budget(const SloBudgetInput& in);

// How long the compute thread waits for more arrivals before a tick that would only prefill: a
// tick takes no prompt once it has started, so the rest of a burst (clients that sent together,
// microseconds apart) would wait it out and then be cut into chunks beside the first prompt's
// decoding stream, which stalls at each, where together they prefill in one tick and decode in
// step. At most kGatherShare of that tick's predicted time, and max_ms; 0 while anyone decodes
// (they would wait too) or when the tick's time is not known.
inline constexpr double kGatherShare = 0.01;
double gather_window_ms(bool anyone_decoding, double predicted_tick_ms, double max_ms);

// A request waiting for KV room (queued, or paused by preemption).
struct Waiting {
  Rank rank = Rank::kUrgent;
  double waited_ms = 0.0;  // since it arrived (queued) or in total while paused
};
// Strict weak order: urgent first, then the longest wait (FIFO within a class). The head of this
// order starts first and blocks those behind it, so a large request is never overtaken forever.
bool waiting_before(const Waiting& a, const Waiting& b);

// A running session that could be paused.
struct VictimCandidate {
  std::int32_t cells = 0;      // KV cells it gives back when paused
  double running_ms = 0.0;     // since it first left the queue (resuming does not reset it)
  Rank rank = Rank::kUrgent;   // relaxed (background) work is paused first
  bool protected_ = false;     // paused often already: paused again only when nothing else makes room
  std::uint64_t start_order = 0;  // when it first started, counted: breaks running_ms ties (a coarse clock)
};
// Pauses sessions in this order until `seqs_needed` sequence ids and `cells_needed` KV cells are
// free: relaxed before urgent, unprotected before protected, then the most recently started first
// (least work behind it; an older one is never paused to let a younger one run, so the oldest
// always progresses). Returns indices into `running`, or nothing when even all of them would not
// make room (then nobody is paused).
std::vector<std::size_t> choose_victims(std::span<const VictimCandidate> running, std::int32_t seqs_needed,
                                        std::int32_t cells_needed);

enum class ParkMode : std::uint8_t { kSave, kRecompute };
enum class ParkPreference : std::uint8_t { kAuto, kSave, kRecompute };
struct ParkCost {
  std::int32_t kv_tokens = 0;           // tokens in the session's KV
  std::size_t kv_bytes = 0;             // what saving copies out (and back)
  std::size_t host_bytes_free = 0;      // room left under --preempt-host-mb
  double ms_per_prefill_token = 0.0;    // measured (TickBudget); 0 until known
};
// Saves when it fits the host cap and copying out and back is cheaper than prefilling the tokens
// again; recomputes otherwise. A forced preference is honoured except that kSave over the host cap
// recomputes.
ParkMode choose_park_mode(const ParkCost& cost, ParkPreference pref);

}  // namespace uma
