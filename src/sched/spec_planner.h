// SpecPlanner: speculative decoding's side of a tick, apart from the Scheduler. It keeps what
// speculation learns across ticks (the acceptance new sessions start from, a verifying tick's
// overhead per shape, the yield guard and the samples it is fed) and plans one tick's draft rows
// from the offers the Scheduler gathers and the facts of the tick (SpecTickFacts), with the
// policy of speculation.h and spec_yield.h. The Scheduler carries a plan out: it gets the drafts
// made (make_drafts), rebuilds the batch with them, verifies the rows and reports back
// (observe_overhead, observe_yield). Its decisions depend only on what it is given, so tests drive
// it with synthetic facts and a fake Drafter. Compute thread only.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "common/bucketed_ewma.h"
#include "metrics/server_metrics.h"
#include "runtime/drafter.h"
#include "sched/session.h"
#include "sched/spec_yield.h"
#include "sched/time_source.h"
#include "sched/speculation.h"

namespace uma {

// One speculating session's part in a plan: the session (its sequence id, tokens and draft) and
// whether its drafts are still to be made by the draft model.
struct SpecCandidate {
  Session* session = nullptr;
  bool by_model = false;
};

// What the plan needs of the tick, measured or predicted by the Scheduler.
struct SpecTickFacts {
  std::size_t decode_rows = 0;          // the tick's decode rows (every decoding session's one)
  std::int32_t room = 0;                // draft rows the batch may add (pass, logits rows, KV)
  std::function<double(std::int32_t)> tick_ms;  // the tick predicted with n draft rows more
  bool device = false;                  // decodes run asynchronously (a GPU: new shapes cost graphs)
  bool per_seq = false;                 // per-sequence KV: unequal drafts are passes of their own
  double pass_ms = 0;                   // what such a pass costs
  std::uint64_t tick_no = 0;            // for the debug trace
};

struct SpecPlannerConfig {
  bool speculate_always = false;        // tests: every draft verified, whatever the cost
  std::int32_t draft_max = 16;
  std::size_t spec_uniform_streams_below = 32;
};

class SpecPlanner {
 public:
  SpecPlanner(const SpecPlannerConfig& config, ServerMetrics& metrics) : config_(config), metrics_(metrics) {}

  void set_drafter(Drafter* drafter) { drafter_ = drafter; }
  Drafter* drafter() const { return drafter_; }
  // Where a new session's acceptance estimate starts: every session's drafts so far, within [0.1, 0.9].
  double starting_acceptance() const;
  void note_verified(std::int32_t proposed, std::int32_t accepted) {
    accept_ = update_acceptance(accept_, proposed, accepted);
  }

  // The tick's plan for `offers` (one per candidate; a draft model's are priced here), declined or
  // not. Learns from it: a declined plan lets the costs that declined it drift back.
  DraftPlan plan(const SpecTickFacts& tick, std::vector<DraftOffer>& offers, std::span<const SpecCandidate> who);
  // Gives each candidate its drafts for `plan`: the draft model's (one call for all), the rest
  // padded to the rows the plan gives it; offers it left out drift back towards trying again.
  void make_drafts(const DraftPlan& plan, std::span<const SpecCandidate> who, const TimeSource& time, std::uint64_t tick_no);

  // The pipelined tick's question, when a session may draft: will the next tick of `rows` decode
  // rows verify none? Yes when the cost plan declined drafts for a tick of as many rows (the
  // guard's bucket: streams come and go) within the last kProbeFirst ticks, or the yield guard
  // declines it (the tick counted as declined); a tick the guard lets verify is granted to the
  // next plan, which does not ask again.
  bool declined_ahead(std::size_t rows);
  // What a verifying tick costs beyond the cost model's rows: on a GPU a decode of a new shape
  // builds its graph (and the next tick, back to one row a session, again). `excess_ms` is the
  // tick's measured minus predicted time; a verifying tick's and the one after it are summed.
  void observe_overhead(double excess_ms, bool verified, std::size_t decode_rows);
  // The yield guard's samples. A decode-only tick's tokens are counted over its whole period, from
  // its tick() to the next (drafting, sampling, events and the compute loop's delivery included,
  // what a pipelined tick hides behind the device and a verifying one does not); a period that
  // ends idle (no work left: end_period) is dropped, and where ticks are pipelined so are a plain
  // tick's that was not pipelined and a verifying tick's before the third of its shape (entries)
  // in a row. observe_yield notes the tick, close_yield observes it.
  struct TickYield {
    std::size_t decode_rows = 0, entries = 0;
    std::int32_t drafts = 0;              // draft rows verified
    double tokens = 0;                    // tokens sampled
    bool prefilled = false;               // prompt tokens rode in it
    bool pipelined = false, pipelining = false;
    double decode_ms = 0;
    std::uint64_t tick_no = 0;
  };
  void observe_yield(const TickYield& t);
  void close_yield(Clock::time_point now, std::uint64_t tick_no);
  void end_period() { yield_pending_.open = false; }

 private:
  std::int32_t stretch_room(const SpecTickFacts& tick, std::int32_t room) const;
  double fixed_ms(const SpecTickFacts& tick, std::span<const SpecCandidate> who, double n_model, double* overhead,
                  double* call, double* catch_up) const;
  void check_passes(const SpecTickFacts& tick, const DraftPlanInput& in, std::span<const DraftOffer> offers,
                    std::span<const SpecCandidate> who, DraftPlan& dp) const;

  static constexpr int kSteadyShapeRun = 3;
  static constexpr double kVerifyStretch = 2.0;  // a verifying tick's predicted time at most, over a plain one's
  SpecPlannerConfig config_;
  ServerMetrics& metrics_;
  Drafter* drafter_ = nullptr;
  // The acceptance of every session's drafts, an EWMA; a new session starts from it, so that a
  // workload whose drafts fail stops paying for them at once.
  double accept_ = kAcceptancePrior;
  // observe_overhead's samples, by the verifying tick's decode rows: a verifying tick of sixteen
  // streams costs beyond its rows what one of a lone stream does not.
  BucketedEwma overhead_ms_;
  SpecYieldGuard yield_guard_;
  bool granted_ = false;                 // the guard already let the next plan verify
  std::size_t last_shape_ = 0;           // the last decode tick's entries
  int shape_run_ = 0;                    // decode ticks of that many entries in a row
  std::size_t plan_declined_bucket_ = 0;  // yield bucket of the last plan the cost declined (0: it did not)
  int ticks_since_plan_ = 0;             // pipelined ticks since that plan
  double draft_ms_last_ = 0.0;           // this tick's draft model time
  Clock::time_point tick_entered_{};     // when tick() was last called
  struct YieldSample {
    std::size_t rows = 0;
    std::int32_t drafts = 0;
    double tokens = 0;
    bool open = false;
  } yield_pending_;                      // the last tick's, until the next tick() closes its period
  struct ExcessPending {
    double ms = 0;
    std::size_t rows = 0;  // its decode rows
  };
  std::optional<ExcessPending> excess_pending_;  // the last tick verified: its excess, awaiting the next tick's
};

}  // namespace uma
