// Scheduler: admits requests, runs one tick (one decode) at a time, and turns sampled tokens into
// Events. Owns every Session and the mapping from sessions to KV sequence ids.
//
// Thread-safety: none; lives on the compute thread (see ComputeThread). Talks to the model only
// through Decoder and to clients only through the Events it appends to caller-provided vectors.
//
// KV accounting: KV is granted as it is used. A session's claim is the cells its sequence holds
// once its next tick is done: every token so far (prompt, and each sampled token, which the next
// decode writes), less the prefix cells a live source (kept sequence, leader) holds for it. A
// request starts (or a paused one resumes) when a sequence id is free and its tokens fit next to
// every claim and the prefix cache's cells, plus a watermark (--kv-watermark) for running sessions
// to grow into; others wait (kQueued/kPaused), urgent before relaxed, oldest first (policy.h:
// waiting_before), and the head of the wait blocks those behind it. Claims grow by one cell per
// decoded token; before every tick, if they outgrew the cache, kept prefixes are evicted and then
// sessions paused (policy.h: choose_victims: background first, then the most recently started;
// often-paused ones last) until the tick fits. With --preempt off nobody can be paused, so a
// request is granted its worst case (prompt + max_tokens) at start instead.
// Preemption: paused at a token boundary (kPaused: KV saved to host memory or dropped, as
// choose_park_mode says), resumed exactly where it was when room comes back; an interactive
// request at the head of the wait also pauses background sessions. Claims are estimates where
// cells are shared; should a decode still find no KV cells, kept prefixes are evicted or one
// session paused and the tick retried; no client sees that. A request whose prompt cannot fit the
// context alone is rejected at admission (no deadlock). Every sequence is freed exactly once,
// whatever ends the session. Room: scheduler_room.cc; admission: scheduler_admit.cc; a token's
// way out (text, events, a session's end): scheduler_output.cc.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "common/bucketed_ewma.h"
#include "metrics/server_metrics.h"
#include "runtime/decoder.h"
#include "runtime/drafter.h"
#include "sched/cpu_meter.h"
#include "sched/thread_governor.h"
#include "sched/batch_builder.h"
#include "sched/embed_queue.h"
#include "sched/kv_ledger.h"
#include "sched/policy.h"
#include "sched/prefix_cache.h"
#include "sched/time_source.h"
#include "sched/session.h"
#include "sched/spec_planner.h"
#include "sched/spec_yield.h"
#include "sched/speculation.h"
#include "sched/tick_budget.h"
#include "sched/tick_cost.h"
#include "serve/request.h"

namespace uma {

struct SchedulerConfig {
  std::int32_t embed_tick_tokens = 512;  // one embeddings pass beside running streams (embed_queue.h)
  // max_tokens: a request's own, else default_max_tokens, else to the context's end; lowered to a
  // nonzero cap (the reply then ends with finish reason "length").
  std::int32_t max_tokens_cap = 0;
  std::int32_t default_max_tokens = 0;
  double kv_watermark = 0.02;          // share of n_ctx kept free when starting or resuming requests
  std::int32_t preemptions_before_protected = 3;  // paused this often: paused last, and urgent if background
  // Per-sequence KV: a gap among the running ids lasting this many ticks is closed by moving
  // sequences; prefixes shorter than per_seq_min_reuse are recomputed rather than copied from
  // another stream (a kept stream taken over in place copies nothing and is reused at any length).
  // Every finished sequence is kept where it ran: keeping costs neither a copy nor memory.
  std::int32_t compact_after_ticks = 16;
  std::int32_t per_seq_min_reuse = 512;
  // Unified KV: keeping is free, but kept cells lengthen every running stream's attention until
  // evicted, and recomputing is dear on a CPU: the bar for a prefix nobody else began with is lower.
  std::int32_t unified_keep_unseen_min = 256;
  std::int32_t max_queue = 64;         // requests waiting for KV room; more are rejected (kOverloaded)
  double max_queue_ms = 30000.0;       // a request waiting longer is rejected (kOverloaded)
  double slo_ttft_ms = 150.0;
  double slo_tbt_ms = 80.0;
  double tick_target_ms = 30.0;
  double gather_max_ms = 20.0;  // most wait for the rest of a burst (policy.h gather_window_ms; 0: never)
  std::int32_t start_budget = 64;
  std::int32_t min_prefill = 8;
  // How a tick's prompt tokens are chosen once the cost model is warm (tick_cost.h): by the worst
  // SLO ratio over running streams and waiting prompts (policy.h slo_prefill_budget), or by the
  // streams' gap alone (the tick budget's controller and the overdue guard; always used until warm).
  bool slo_prefill = true;
  // With slo_prefill, once every target can be met: the fullest tick that keeps them met (fewer
  // passes; a long prompt done in fewer, longer gaps) rather than the least worst ratio.
  bool slo_fill = true;
  // Raise the prefill floor to the smallest chunk the calibration found near the best per-token rate
  // (off when --min-prefill was given).
  bool measured_prefill_floor = true;
  // A prompt is prefilled in at most this many chunks (0: no bound): its chunks are at least its
  // length over this (a chunk reads its sequence's KV once; at depth small ones cost far more).
  std::int32_t prompt_chunks_max = 8;
  // A prompt's TTFT target is the SLO on top of this many times the predicted prefill of its own
  // prompt and of the prompts that arrived before it and are still going in. Below 1 it weighs
  // TTFT above the streams' gaps (docs/ARCHITECTURE.md, Scheduler v2).
  double ttft_solo_factor = 0.3;
  // The same with per-sequence KV (the GPU default), -1 meaning n_batch: every prompt chunk there
  // is a pass of its own, and ticks that carry many prompts at once cost far less than as many
  // ticks carrying one (figures: docs/BENCHMARKS.md).
  std::int32_t per_seq_min_prefill = -1;
  // Background requests: their default TTFT target, and the most time one spends paused in all;
  // past either it ranks as urgent and is no longer paused (no starvation).
  double background_max_wait_ms = 10000.0;
  std::int32_t tenant_max_requests = 0;  // per metadata.tenant, active + waiting; 0: no cap
  bool preemption = true;
  ParkPreference park = ParkPreference::kAuto;
  // Speculative decoding by prompt lookup (sched/speculation.h): the default for requests that do
  // not say, and the most draft tokens one session verifies in a tick.
  bool speculate = true;
  std::int32_t draft_max = 16;
  LookupConfig lookup;
  bool speculate_always = false;  // tests: every draft found is verified, whatever the cost
  // Per-sequence KV: below this many decoding streams a plan may give every stream the same K
  // (one pass; scheduler_spec.cc). A tuning knob for measuring the gate, not a user setting.
  std::size_t spec_uniform_streams_below = 32;
  // With an asynchronous decoder (a GPU): launch the next decode-only batch as soon as a tick's
  // tokens are sampled, before they become text and events (scheduler_pipeline.cc).
  bool pipelined_ticks = true;
  std::size_t park_host_bytes = std::size_t{1} << 30;  // host memory for saved KV
  PrefixCacheConfig prefix;  // its kept sequences use ids beyond the sessions' (n_seq_max covers both)
};

class Scheduler {
 public:
  // `time` outlives the scheduler; tests pass a ManualClock.
  Scheduler(Decoder& decoder, ServerMetrics& metrics, const SchedulerConfig& config,
            const TimeSource& time = steady_time());
  const TimeSource& time() const { return time_; }
  ~Scheduler();

  // Tokenizes and queues a request, or appends an error event for it.
  void admit(Request request, std::vector<Event>& out);
  // Ends a request at the token boundary with kDone(kCancelled). Unknown ids are ignored.
  void cancel(RequestId id, std::vector<Event>& out);
  // Ends every request with `why` (shutdown).
  void fail_all(const Status& why, std::vector<Event>& out);

  bool has_work() const;                 // some session is prefilling or decoding
  double gather_window_ms() const;  // before the next tick (policy.h): > 0 only if nobody decodes
  void count_gathered(std::size_t requests) { metrics_.requests_gathered_total += requests; }
  void tick(std::vector<Event>& out);    // exactly one decode
  // A pipelined tick leaves a decode in flight (tick's next call reads it). settle() reads it and
  // applies its tokens without launching another: the compute thread calls it before admitting,
  // cancelling or failing anything, which therefore never meets a decode in flight.
  void settle(std::vector<Event>& out);
  void publish_metrics();                // refresh gauges and the per-session table
  // Calibration (scheduler_calibrate.cc): what a prompt token costs, measured before the first
  // request on a scratch sequence, in chunks timed like ticks and fed to the tick budget's cost fit:
  // a warm-up chunk and one-token step (graph building, first kernel launches), a measured pair,
  // then a sequence filled and chunks of growing size appended at depth, the smallest near the
  // best per-token rate becoming the prefill floor. begin_calibration() only plans it (before any
  // admit(); kInternal after); each calibrate_step() decodes one chunk, so an idle daemon
  // calibrates while it already serves: the first admit() ends it, keeping what was measured
  // (fail_all() too). It stops after `most_ms` of decoding (at least one measured pair). Its
  // sequence id comes from the ledger and goes back, its KV freed; its end is logged.
  Status begin_calibration(double most_ms);
  bool calibrating() const { return calibration_.has_value(); }
  Status calibrate_step();  // the step's outcome; a failure ends the calibration
  // begin_calibration() and every step at once (a cluster agent, before its first beat, so that
  // routing's first decisions use this machine's prefill rate instead of a guess).
  Status calibrate(double most_ms);
  const TickCost& cost_model() const { return cost_; }
  // A draft model for speculative decoding (runtime/drafter.h), or none; it outlives the scheduler.
  void set_drafter(Drafter* drafter) { spec_.set_drafter(drafter); }  // for the start line; compute thread after start
  std::int32_t prefill_knee() const { return prefill_knee_; }  // likewise
  // Threads that follow the machine (scheduler_threads.cc, thread_governor.h): the decoder's (and a
  // draft model's) pool resized between decodes from what `meter` measures; adaptive = false keeps
  // the decoder's count and only reports the measure. Before the first tick; the meter outlives
  // the scheduler. Without one, nothing is measured.
  void use_cpu_meter(CpuMeter* meter, bool adaptive);

 private:
  // scheduler_room.cc: who holds KV.
  enum class PauseCause : std::uint8_t { kPriority, kKvFull };
  Rank rank_of(const Session& s, Clock::time_point now) const;
  std::int32_t claim(const Session& s) const;    // cells granted to a session holding a sequence
  std::int32_t need(const Session& s) const;     // cells a waiting session is granted when it starts
  std::int32_t reusable_now(const Session& s) const;  // its prompt's tokens the KV cache could share now
  std::int32_t cells_granted() const;            // every claim + the prefix cache's cells (unified KV; per-seq: 0)
  bool anyone_running() const;                   // some session holds a sequence (the watermark protects it)
  // The ledger's room test and arithmetic (kv_ledger.h) for session s, with the current claims.
  std::int32_t cells_free() const;
  std::int32_t shortfall(const Session& s) const;
  bool fits(const Session& s) const;
  // Starts or resumes in waiting order, preempting for urgent heads; a start the decoder refuses
  // ends that request with an error event.
  void start_waiting(std::vector<Event>& out);
  void take_room(Session& s, std::vector<Event>& out);  // kQueued -> kPrefill, or resumes a kPaused session
  // The sequence id a start or resume takes that adopts no kept stream: the lowest free one, except
  // that with per-sequence KV a kept stream nothing has reused (PrefixCache::unproven) between the
  // lowest running id and it is dropped and its id taken: a gap filled without a move.
  std::int32_t take_id();
  std::pair<std::int32_t, std::int32_t> running_ids() const;  // lowest and highest running id; -1 when none
  bool between_running(const Session& s) const;  // other sessions run in ids both below and above s's
  bool preempt_for(const Session& head, Clock::time_point now);
  void make_room_for_tick(Clock::time_point now);  // claims outgrew the cache: evict, then pause
  VictimCandidate victim_candidate(const Session& s, Clock::time_point now) const;
  void gather_victims(Clock::time_point now, std::vector<VictimCandidate>& running, std::vector<Session*>& who);  // every active session
  void pause(Session& s, Clock::time_point now, PauseCause cause);
  void end_pause(Session& s, Clock::time_point now);  // time-in-pause accounting
  bool recover_kv_exhausted();                   // evicts kept prefixes, else pauses one session
  // Prefix cache (scheduler_room.cc): reuse at start, followers catching up, keeping at the end.
  PrefixCache::Hit find_prefix(const Session& s);  // the start's lookup (counts the start's first block)
  // A started session's prefix from the hit: taken over (adopted), restored, shared or followed.
  void reuse_prefix(Session& s, const PrefixCache::Hit& hit, bool adopted);
  void resolve_followers();
  Session* find_session(RequestId id);
  const Session* find_session(RequestId id) const;
  void expire_queued(std::vector<Event>& out);  // rejects requests that waited past max_queue_ms
  // admit()'s steps (scheduler_admit.cc); a check's failure is the request's error. The prompt's
  // tokens with every token id the request names checked; n_prompt and max_tokens within the
  // context; the tenant's and the queue's caps (and what the prompt could reuse); the stop strings,
  // SLOs and speculation.
  Status read_prompt(Request& request, Session& s);
  Status size_request(const Request& request, Session& s);
  Status check_admission_caps(Session& s);
  void set_session_targets(Request& request, Session& s);
  void apply_token(Session& s, Token token, Clock::time_point now, std::vector<Event>& out);
  void run_embeddings(std::vector<Event>& out);
  // The model's end of generation, or one of the request's stop_token_ids.
  bool ends_generation(const Session& s, Token token) const;
  void note_logprobs(Session& s, std::int32_t batch_index, Token token);  // sampling.logprobs >= 0
  void tell_prompt(Session& s, Event& first);  // the request's first token event says its prompt's length
  // Emits text through the stop filter; returns true when a stop string ended the request.
  bool emit_text(Session& s, std::string_view text, Token token, std::vector<Event>& out);
  // Flushes held text (unless a stop matched), appends kDone and finishes the session.
  void complete(Session& s, FinishReason reason, std::vector<Event>& out, bool stop_matched = false);
  void finish(Session& s, SessionState terminal);
  // Per-sequence KV: moves the highest running sequences into lower free ids, so that one decode
  // is one pass (llama.cpp splits a batch at every gap between sequence ids). A move is a copy
  // between KV streams, after which llama.cpp reserves its worst-case graph again (~15-25 ms of
  // host time on a GPU), while a gap costs a filler row per decode (the runtime's, see
  // runtime/stream_batch.h; a pass of its own where it cannot fill) and is usually taken by the
  // next arrival, which gets the lowest free id: so only a gap that outlives
  // SchedulerConfig::compact_after_ticks is closed by moving. A kept prefix's stream between two
  // running ones is a gap no arrival fills: it moves above them (and stays reusable there) when it
  // has been reused, and is dropped otherwise (under churn most finished streams are never
  // reused, and moving them out of the way cost c=64 on a GPU 8% of its tokens).
  void compact_sequences();
  void group_prompt_ids(std::vector<Event>& out);
  // Moves what holds KV sequence `from` (a kept prefix or a session's stream) to the unused id
  // `to`, a stream copy; the ids' ownership is the caller's.
  void move_holder(std::int32_t from, std::int32_t to);
  Session* session_at(std::int32_t seq) const;
  void reap();  // drops terminal sessions
  // scheduler_spec.cc: speculative decoding (its state and plans: spec_planner.h). Drafts for the
  // planned decode rows (then the batch is built again with them); the rows sampled, each
  // speculating session's only while its drafts are accepted, and the rejected tokens' KV removed.
  void plan_speculation(const TickPlan& plan);
  // The sessions among the planned decode rows that could verify drafts, with their offers.
  void gather_offers(const TickPlan& plan, std::int32_t rows_max, std::vector<DraftOffer>& offers,
                     std::vector<SpecCandidate>& who);
  SpecTickFacts spec_facts(std::span<const SpecCandidate> who) const;  // the tick as the plan sees it
  bool may_draft(const Session& s) const;  // plan_speculation could give it drafts now
  void take_prediction(Session& s, std::string_view text);  // the request's prediction as s.prediction
  void observe_spec_overhead(double excess_ms);           // spec_.observe_overhead for this tick
  void observe_yield(double decode_ms, bool pipelined);   // spec_.observe_yield for this tick
  void sample_batch();
  static constexpr Token kNotSampled = -1;  // sampled_: a row after a rejected draft token
  // scheduler_pipeline.cc: the pipelined tick. launch_pipelined() (after sample_batch, before
  // apply_batch) feeds every continuing decode row's sampled token to the next decode; finish_
  // pipelined() reads that decode's rows as tick() reads its own, then launches again or not.
  void launch_pipelined();
  void finish_pipelined(std::vector<Event>& out, bool relaunch);
  void drop_finished_from_next();  // before reap(): rows of sessions that ended go unread
  // The steps of tick(), in order.
  void prepare_tick(std::vector<Event>& out);  // expiry, offload, starts, room, compaction
  bool gather(Clock::time_point now);          // order_ and candidates_; false when nobody is active
  void fail_batch(const Status& st, std::vector<Event>& out);  // a failed decode fails its sessions
  void record_tick(double decode_ms, std::int32_t budget);     // tick budget and metrics
  void apply_batch(Clock::time_point decoded_at, std::vector<Event>& out);  // positions, sampled_ tokens
  void trace_tick(const TickPlan& plan, std::int32_t budget, double decode_ms, const Status& st) const;
  // scheduler_budget.cc: the tick's cost model and the SLO budget.
  double span_of(std::int32_t pos, std::int32_t n) const;  // attention cells of n rows from pos on
  double kv_read_of(std::int32_t pos) const;                // cells a sequence at pos reads in a tick
  TickWork batch_work() const;                              // of batch_, as built
  TickWork empty_work() const;                              // no rows yet (a unified pool's read)
  void add_decode_row(TickWork& w, const Session& s) const; // one decode row of s
  double ttft_target(Session& s);                           // the SLO plus its prefill's and those ahead
  double solo_prefill_ms(const Session& s) const;           // its remaining prompt alone, predicted
  // The SLO-balanced prompt tokens for this tick (after gather), or -1 while the model is cold.
  std::int32_t slo_budget(Clock::time_point now, std::int32_t capacity);
  void observe_cost(double decode_ms);                      // the model learns; bytes per session
  std::int32_t prefill_floor() const;  // min_prefill, the measured knee, the first prompt's share (after gather)
  static constexpr double kKneeSlack = 1.3;                 // "near the best per-token rate"
  // scheduler_calibrate.cc.
  struct Calibration {
    double most_ms = 0.0;
    double spent_ms = 0.0;      // decoding so far
    std::vector<Token> text;    // what the chunks decode, repeated
    std::int32_t seq = -1;      // the scratch sequence's id, held from begin to end
    bool open = false;          // its sequence holds KV now
    std::int32_t big = 0;       // the depth chunks are appended at, and the first rounds' scale
    std::int32_t at = 0;        // the open sequence's length
    enum class Phase : std::uint8_t { kWarmUp, kMeasured, kFill, kAtDepth };
    Phase phase = Phase::kWarmUp;  // of the next step
    std::size_t sized = 0;      // kAtDepth: chunks of growing size appended so far
    std::map<std::int32_t, double> per_token;  // chunk size at depth -> ms per token
  };
  double timed_chunk(Calibration& c, std::int32_t n, Status& st);  // n tokens at c.at; ms, < 0 on failure
  void end_calibration(const char* outcome);  // frees its sequence, publishes and logs what it measured

  Decoder& decoder_;
  ServerMetrics& metrics_;
  SchedulerConfig config_;
  const TimeSource& time_;
  std::uint64_t starts_ = 0;  // sessions started so far (Session::start_order)
  TickBudget budget_;
  TickCost cost_;
  double unified_span_ = 0.0;  // unified KV: cells every row's attention spans this tick
  std::int32_t prefill_knee_ = 0;  // calibration: the smallest efficient prompt chunk (0: not measured)
  std::optional<Calibration> calibration_;  // planned and not ended
  KvLedger ledger_;  // sequence ids and the room test: every take and give back goes through it
  PrefixCache cache_;  // draws its ids from ledger_.ids(), as sessions do
  EmbedQueue embeds_;
  double embed_ms_per_token_ = 0.0;  // an embeddings pass's measured cost per token (EWMA)
  std::vector<std::unique_ptr<Session>> sessions_;  // admission order
  std::int32_t gap_ticks_ = 0;  // per-sequence KV: consecutive ticks whose running ids had a gap
  std::size_t parked_bytes_ = 0;      // saved KV of paused sessions
  std::size_t rr_cursor_ = 0;
  bool guard_fired_last_ = false;
  BuiltBatch batch_;                  // reused every tick
  BuiltBatch next_;                   // the pipelined decode in flight (when inflight_)
  bool inflight_ = false;
  Status inflight_status_;            // what its launch returned (a failure fails its sessions when read)
  Clock::time_point launched_at_{};
  std::int32_t published_budget_ = 0; // the last tick's prefill budget (a pipelined tick plans none)
  std::vector<Candidate> candidates_; // reused every tick
  std::vector<Session*> order_;       // reused every tick
  std::vector<Token> sampled_;        // the tick's token per batch_.rows entry, all sampled before any is applied
  std::uint64_t tick_no_ = 0;
  SpecPlanner spec_;  // speculation's state across ticks, and its plans
  // scheduler_threads.cc: a window of the machine when one is due, then the governor's count for
  // this decode; returns the process's CPU time (ms) when the decode's is worth measuring, else -1.
  double threads_before_decode(Clock::time_point now);
  void threads_after_decode(double wall_ms, double cpu_before_ms);
  struct HostThreads {
    CpuMeter* meter = nullptr;
    std::optional<ThreadGovernor> governor;
    CpuSample last;               // the window's start
    bool sampled = false;
    Clock::time_point window_at{};
  } threads_;
};

}  // namespace uma
