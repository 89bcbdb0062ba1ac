// Scheduler: admits requests, runs one tick (one decode) at a time, and turns sampled tokens into
// Events. Owns every Session and the mapping from sessions to KV sequence ids.
//
// Thread-safety: none; lives on the compute thread (see ComputeThread). Talks to the model only
// through Decoder and to clients only through the Events it appends to caller-provided vectors.
//
// KV accounting: a request is started only when a sequence id is free and its worst case
// (prompt + max_tokens) fits the cells not yet promised to others, so a decode never runs out of
// KV; others wait in FIFO order (kQueued). Every sequence is freed exactly once, whatever ends
// the session (finish, error, cancel, shutdown).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "metrics/server_metrics.h"
#include "runtime/decoder.h"
#include "sched/batch_builder.h"
#include "sched/request.h"
#include "sched/session.h"
#include "sched/tick_budget.h"

namespace uma {

struct SchedulerConfig {
  std::int32_t max_tokens_cap = 4096;  // upper bound on any request's max_tokens
  std::int32_t max_queue = 64;         // requests waiting for KV room; more are rejected (kOverloaded)
  double max_queue_ms = 30000.0;       // a request waiting longer is rejected (kOverloaded)
  double slo_ttft_ms = 150.0;
  double slo_tbt_ms = 80.0;
  double tick_target_ms = 30.0;
  std::int32_t start_budget = 64;
  std::int32_t min_prefill = 16;
};

class Scheduler {
 public:
  Scheduler(Decoder& decoder, ServerMetrics& metrics, const SchedulerConfig& config);
  ~Scheduler();

  // Tokenizes and queues a request, or appends an error event for it.
  void admit(Request request, std::vector<Event>& out);
  // Ends a request at the token boundary with kDone(kCancelled). Unknown ids are ignored.
  void cancel(RequestId id, std::vector<Event>& out);
  // Ends every request with `why` (shutdown).
  void fail_all(const Status& why, std::vector<Event>& out);

  bool has_work() const;                 // some session is prefilling or decoding
  void tick(std::vector<Event>& out);    // exactly one decode
  void publish_metrics();                // refresh gauges and the per-session table

 private:
  void start_queued();
  void expire_queued(std::vector<Event>& out);  // rejects requests that waited past max_queue_ms
  void apply_token(Session& s, Token token, Clock::time_point now, std::vector<Event>& out);
  // Emits text through the stop filter; returns true when a stop string ended the request.
  bool emit_text(Session& s, std::string_view text, Token token, std::vector<Event>& out);
  // Flushes held text (unless a stop matched), appends kDone and finishes the session.
  void complete(Session& s, FinishReason reason, std::vector<Event>& out, bool stop_matched = false);
  void finish(Session& s, SessionState terminal);
  void reap();  // drops terminal sessions

  Decoder& decoder_;
  ServerMetrics& metrics_;
  SchedulerConfig config_;
  TickBudget budget_;
  std::vector<std::unique_ptr<Session>> sessions_;  // admission order
  std::vector<std::int32_t> free_seqs_;
  std::int32_t reserved_cells_ = 0;
  std::size_t rr_cursor_ = 0;
  bool guard_fired_last_ = false;
  BuiltBatch batch_;                  // reused every tick
  std::vector<Candidate> candidates_; // reused every tick
  std::vector<Session*> order_;       // reused every tick
};

}  // namespace uma
