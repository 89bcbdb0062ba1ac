// ServerMetrics: counters and gauges shared by the I/O and compute threads, rendered as one JSON line.
//
// Thread-safety: every scalar is an atomic written by exactly one thread (noted per field) and read
// by any; the per-session table is replaced whole under a mutex by the compute thread. Rendering
// never blocks the compute thread for longer than copying that small table.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "metrics/histogram.h"

namespace uma {

// Why admission control turned a request away (counted as rejected_total{reason}).
enum class RejectReason : std::uint8_t { kQueueFull, kQueueTimeout, kTenantCap, kSessionCap, kContext };
inline constexpr std::size_t kRejectReasons = 5;
std::string_view reject_reason_name(RejectReason r);

// Sessions by scheduler state, as the sessions{state} gauge shows them.
enum class GaugeState : std::uint8_t { kQueued, kPrefill, kDecode, kPaused };
inline constexpr std::size_t kGaugeStates = 4;

struct SessionTiming {
  std::uint64_t id = 0;
  std::string state;
  bool background = false;
  std::int32_t preemptions = 0;
  std::int32_t prompt_tokens = 0;
  std::int32_t prefilled = 0;
  std::int32_t generated = 0;
  std::int32_t kv_tokens = 0;
  double queue_ms = 0.0;   // received -> started prefill (or now, while queued)
  double ttft_ms = -1.0;   // received -> first token; -1 before it
  double tbt_ms_ewma = 0.0;
  double tbt_ms_max = 0.0;
  double bytes_per_token = 0.0;  // its share of the ticks' predicted bytes per token generated
};

class ServerMetrics {
 public:
  static constexpr std::size_t kErrorKinds = static_cast<std::size_t>(ErrorCode::kInternal) + 1;

  // Written by the compute thread.
  std::atomic<std::uint64_t> tokens_generated_total{0};
  std::atomic<std::uint64_t> prompt_tokens_total{0};
  std::atomic<std::uint64_t> batch_calls_total{0};
  std::atomic<std::uint64_t> requests_completed_total{0};
  std::atomic<std::uint64_t> requests_cancelled_total{0};
  std::atomic<std::uint64_t> prefill_skipped_ticks_total{0};  // latency guard fired
  std::atomic<std::uint64_t> pipelined_ticks_total{0};  // decodes launched before the last one's tokens were applied
  // Speculative decoding (sched/speculation.h).
  std::atomic<std::uint64_t> spec_ticks_total{0};          // ticks that verified drafts
  std::atomic<std::uint64_t> spec_declined_ticks_total{0};  // drafts there, and the cost model said no
  std::atomic<std::uint64_t> spec_drafted_total{0};        // draft tokens verified
  std::atomic<std::uint64_t> spec_verifications_total{0};  // a session's drafts verified in a tick (accepted / this: mean accepted length)
  std::atomic<double> spec_overhead_ms{0.0};               // a verifying tick's cost beyond its rows (graph builds), the last one's bucket
  std::atomic<std::uint64_t> spec_accepted_total{0};       // of them, accepted
  std::atomic<double> spec_draft_ms_total{0.0};            // time the draft model spent drafting
  std::atomic<double> spec_draft_step_ms{0.0};             // its measured step
  std::atomic<double> spec_draft_call_ms{0.0};             // a call's cost beyond its steps, the last call's bucket
  std::atomic<std::uint64_t> ttft_slo_miss_total{0};
  std::atomic<std::uint64_t> tbt_slo_miss_total{0};
  std::atomic<std::int64_t> last_batch_size{0};
  std::atomic<std::int64_t> tick_budget{0};
  std::atomic<std::int64_t> tick_prefill_floor{0};  // fewest prefill tokens a tick carries (TickBudget::floor)
  std::atomic<double> prefill_fixed_ms{0.0};        // fitted fixed cost of a prefill tick
  std::atomic<double> prefill_ms_per_token{0.0};    // fitted marginal cost of a prompt token (0: not yet)
  std::atomic<double> decode_ms_last{0.0};
  // The compute threads (sched/thread_governor.h).
  std::atomic<std::int64_t> compute_threads{0};            // the last decode's
  std::atomic<double> cpu_others_cores{0.0};               // cores of ours others kept busy, the last window
  std::atomic<std::uint64_t> compute_thread_changes_total{0};
  // The tick cost model (sched/tick_cost.h) and the SLO budget (policy.h slo_prefill_budget).
  std::atomic<double> tick_predicted_ms{0.0};     // the last tick's prediction (0: model cold)
  std::atomic<double> tick_predict_error{0.0};    // median |predicted - measured| / measured, recent ticks
  std::atomic<double> slo_stream_ratio{0.0};      // the last SLO budget's predicted stream gap / target
  std::atomic<double> slo_prompt_ratio{0.0};      // ... and worst waiting prompt's TTFT / target
  std::atomic<double> bytes_per_token_last{0.0};  // the last finished request's bytes per generated token
  std::atomic<double> decode_ms_ewma{0.0};
  std::atomic<double> decode_step_ms{0.0};  // decode-only tick with the streams decoding at the last tick (0: none)
  std::atomic<double> ttft_ms_last{-1.0};
  std::atomic<std::int64_t> active_sessions{0};   // prefill + decode
  std::atomic<std::int64_t> queued_sessions{0};   // admitted, waiting for KV room
  std::atomic<std::int64_t> prefill_backlog_tokens{0};  // prompt tokens admitted, not yet prefilled
  std::atomic<std::int64_t> draining{0};         // 1 from a SIGTERM with --drain-sec until the exit
  std::atomic<std::int64_t> drain_in_flight{0};  // requests in flight when the drain began
  // requests_admitted_total when the gauges above were last published: the requests they cover (a
  // router that sent one more knows whether this backlog includes it yet).
  std::atomic<std::uint64_t> backlog_admitted{0};
  std::atomic<std::int64_t> kv_tokens_used{0};    // tokens held in KV across all sequences
  std::atomic<std::int64_t> kv_sequences_used{0}; // sequences with any KV
  std::atomic<std::int64_t> kv_cells_total{0};
  std::atomic<std::int64_t> kv_cells_granted{0};   // claimed by requests holding a sequence (scheduler.h)
  std::atomic<std::uint64_t> requests_admitted_total{0};
  std::atomic<std::uint64_t> preempted_saved_total{0};       // paused, KV copied to host memory
  std::atomic<std::uint64_t> preempted_recomputed_total{0};  // paused, KV dropped
  std::atomic<std::uint64_t> kv_sequence_moves_total{0};     // per-sequence KV: running sequences moved to close a gap
  std::atomic<std::uint64_t> preempted_kv_full_total{0};     // paused: the running sessions' KV outgrew the cache
  std::atomic<std::uint64_t> preempted_priority_total{0};    // paused: background, for an interactive request
  std::atomic<std::uint64_t> resumed_total{0};
  std::atomic<std::uint64_t> kv_restore_fallbacks_total{0};  // saved KV did not fit back: recomputed
  std::atomic<std::uint64_t> kv_exhausted_total{0};          // a decode found no KV cells (recovered)
  std::atomic<std::int64_t> parked_bytes{0};                 // host memory held by saved KV
  std::array<std::atomic<std::int64_t>, kGaugeStates> sessions_by_state{};
  // Prefix cache.
  std::atomic<std::uint64_t> prefix_lookups_total{0};
  std::atomic<std::uint64_t> prefix_hits_total{0};
  std::atomic<std::uint64_t> prefix_lookup_tokens_total{0};  // prompt tokens looked up
  std::atomic<std::uint64_t> prefix_reused_tokens_total{0};  // of those, served from cached KV
  std::atomic<std::uint64_t> prefix_evictions_total{0};
  std::atomic<std::uint64_t> prefix_not_kept_total{0};      // finished sequences the admission rule let go
  std::atomic<std::uint64_t> prefix_adopted_total{0};       // kept streams a request took over in place (per-sequence KV)
  std::atomic<std::int64_t> prefix_kept_sequences{0};       // finished sequences kept in the KV cache
  std::atomic<std::int64_t> prefix_host_snapshots{0};
  std::atomic<std::int64_t> prefix_kept_cells{0};
  std::atomic<std::int64_t> prefix_host_bytes{0};

  // Written by the I/O thread.
  std::atomic<std::uint64_t> connections_accepted_total{0};
  std::atomic<std::uint64_t> connections_rejected_total{0};  // over the connection cap (Unix socket)
  std::atomic<std::uint64_t> http_connections_rejected_total{0};
  std::atomic<std::uint64_t> accept_pauses_total{0};         // accept backed off: out of fds or memory
  std::atomic<std::uint64_t> requests_total{0};
  std::atomic<std::uint64_t> ignored_fields_total{0};
  std::atomic<std::uint64_t> inputs_prepared_off_io_total{0};  // request bodies parsed and rendered off the I/O thread
  std::atomic<std::uint64_t> requests_gathered_total{0};  // admitted while the compute thread gathered a burst
  std::atomic<std::uint64_t> gateway_tokens_total{0};  // prompts a gateway sent as tokens (not tokenized here)
  std::atomic<std::uint64_t> embedding_requests_total{0};
  std::atomic<std::uint64_t> embedding_tokens_total{0};
  // Written by the prepare stage (the image encoder's counts).
  std::atomic<std::uint64_t> images_encoded_total{0};
  std::atomic<std::uint64_t> image_cache_hits_total{0};
  std::atomic<std::uint64_t> tx_drops_total{0};              // reader too slow: dropped
  std::atomic<std::uint64_t> disconnects_mid_stream_total{0};
  std::atomic<std::uint64_t> idle_timeouts_total{0};
  std::atomic<std::int64_t> connections_open{0};            // Unix socket
  std::atomic<std::int64_t> http_connections_open{0};
  std::atomic<std::int64_t> sessions_open{0};                // Unix socket requests holding a session slot (SessionSlots)
  std::atomic<std::int64_t> http_sessions_open{0};           // HTTP completions holding a session slot
  std::atomic<std::int64_t> sessions_waiting{0};             // requests in line for a session slot (StreamServer)

  // Distributions (observed by the compute thread; milliseconds or tokens).
  Histogram ttft_ms{latency_ms_bounds()};
  Histogram inter_token_ms{latency_ms_bounds()};
  Histogram queue_ms{latency_ms_bounds()};
  Histogram decode_ms{latency_ms_bounds()};
  Histogram batch_tokens{token_count_bounds()};
  Histogram prefill_chunk{token_count_bounds()};
  Histogram paused_ms{latency_ms_bounds()};  // one pause, from preemption to resumption (or the end)

  // Either thread.
  void count_rejected(RejectReason r) { rejected_[static_cast<std::size_t>(r)].fetch_add(1, std::memory_order_relaxed); }
  std::uint64_t rejected(RejectReason r) const { return rejected_[static_cast<std::size_t>(r)].load(); }
  void count_error(ErrorCode code) { errors_[static_cast<std::size_t>(code)].fetch_add(1, std::memory_order_relaxed); }
  std::uint64_t errors(ErrorCode code) const { return errors_[static_cast<std::size_t>(code)].load(); }

  void publish_sessions(std::vector<SessionTiming> sessions);  // compute thread
  std::string to_json() const;                                 // any thread; one line, no newline
  std::string to_prometheus() const;                           // any thread; text exposition 0.0.4

 private:
  std::array<std::atomic<std::uint64_t>, kErrorKinds> errors_{};
  std::array<std::atomic<std::uint64_t>, kRejectReasons> rejected_{};
  mutable std::mutex sessions_mu_;
  std::vector<SessionTiming> sessions_;  // guarded by sessions_mu_
};

}  // namespace uma
