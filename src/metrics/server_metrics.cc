#include "metrics/server_metrics.h"

#include "metrics/prometheus.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <functional>
#include <iterator>
#include <span>
#include <utility>

#include "common/json_text.h"

namespace uma {

std::string_view reject_reason_name(RejectReason r) {
  switch (r) {
    case RejectReason::kQueueFull: return "queue_full";
    case RejectReason::kQueueTimeout: return "queue_timeout";
    case RejectReason::kTenantCap: return "tenant_cap";
    case RejectReason::kSessionCap: return "session_cap";
    case RejectReason::kContext: return "context";
  }
  return "?";
}

void ServerMetrics::publish_sessions(std::vector<SessionTiming> sessions) {
  std::lock_guard<std::mutex> lock(sessions_mu_);
  sessions_.swap(sessions);
}

// Every metric is declared once, below: its key in the JSON snapshot, its Prometheus name (under
// "uma_", Prometheus's conventions: counters end in _total, nothing else does, base units) and
// type, its help text and how to read it. to_json() and to_prometheus() both walk these tables,
// so the two can no longer drift apart; `promtool check metrics` runs on the output in a test.
namespace {

using M = ServerMetrics;
using Json = nlohmann::ordered_json;
enum class Type : std::uint8_t { kCounter, kGauge };

struct Scalar {
  const char* json;   // "name", or "group.name" inside the JSON object "group"
  const char* prom;   // after "uma_"
  Type type;
  const char* help;
  std::function<Json(const M&)> read;  // an integer or a double, in the JSON unit
  double prom_scale = 1.0;             // JSON unit -> Prometheus base unit (ms -> s: 0.001)
};

// A labelled family: one Prometheus metric with one label; in JSON either an object keyed by the
// label (json_object) or one top-level key per label value (json_keys, for older fields).
struct Family {
  const char* json_object;  // nullptr: use each sample's json key
  const char* prom;
  Type type;
  const char* label;
  const char* help;
  std::function<void(const M&, std::vector<std::pair<std::string, std::uint64_t>>&)> read;
  std::vector<const char*> json_keys = {};  // by sample, when json_object is nullptr
};

struct Hist {
  const char* json;  // in the JSON object "histograms"
  const char* prom;
  const char* help;
  Histogram M::*member;
  double prom_scale;
};

template <typename A>
std::function<Json(const M&)> load(A M::*field) {
  return [field](const M& m) { return Json((m.*field).load()); };
}

// The decodes, the tick's cost model and the compute threads.
std::vector<Scalar> scalars_compute() {
  return {
      {"tokens_generated_total", "generation_tokens_total", Type::kCounter, "Tokens generated.", load(&M::tokens_generated_total)},
      {"prompt_tokens_total", "prompt_tokens_total", Type::kCounter, "Prompt tokens admitted.", load(&M::prompt_tokens_total)},
      {"batch_calls_total", "decode_calls_total", Type::kCounter, "llama_decode calls.", load(&M::batch_calls_total)},
      {"last_batch_size", "last_batch_tokens", Type::kGauge, "Tokens in the last decode.", load(&M::last_batch_size)},
      {"tick_budget", "tick_prefill_budget_tokens", Type::kGauge, "Prefill tokens the last tick could carry next to decode.", load(&M::tick_budget)},
      {"tick_prefill_floor", "tick_prefill_floor_tokens", Type::kGauge, "Fewest prefill tokens a tick carries (fitted floor).", load(&M::tick_prefill_floor)},
      {"prefill_fixed_ms", "prefill_fixed_seconds", Type::kGauge, "Fitted fixed cost of a tick that prefills.", load(&M::prefill_fixed_ms), 0.001},
      {"tick_predicted_ms", "tick_predicted_seconds", Type::kGauge, "The cost model's prediction of the last tick (0 while cold).", load(&M::tick_predicted_ms), 0.001},
      {"tick_predict_error", "tick_predict_error_ratio", Type::kGauge, "Median relative error of the tick cost model over recent ticks.", load(&M::tick_predict_error)},
      {"slo_stream_ratio", "slo_stream_ratio", Type::kGauge, "Last tick plan: the streams' predicted gap over their target.", load(&M::slo_stream_ratio)},
      {"slo_prompt_ratio", "slo_prompt_ratio", Type::kGauge, "Last tick plan: the worst waiting prompt's predicted TTFT over its target.", load(&M::slo_prompt_ratio)},
      {"bytes_per_token_last", "bytes_per_generated_token_last", Type::kGauge, "Bytes moved per generated token by the last finished request (its share of the ticks).", load(&M::bytes_per_token_last)},
      {"compute_threads", "compute_threads", Type::kGauge, "Threads the last decode computed with (--threads auto: the cores other processes leave).", load(&M::compute_threads)},
      {"cpu_others_cores", "cpu_others_cores", Type::kGauge, "Cores of this process's CPUs that other processes (or a hypervisor's steal) kept busy, the last measured window.", load(&M::cpu_others_cores)},
      {"compute_thread_changes_total", "compute_thread_changes_total", Type::kCounter, "Times --threads auto changed the compute threads between decodes.", load(&M::compute_thread_changes_total)},
      {"decode_ms_last", "decode_last_seconds", Type::kGauge, "Duration of the last llama_decode.", load(&M::decode_ms_last), 0.001},
      {"decode_ms_ewma", "decode_ewma_seconds", Type::kGauge, "Moving average of llama_decode durations.", load(&M::decode_ms_ewma), 0.001},
      {"decode_step_ms", "decode_step_seconds", Type::kGauge, "Decode-only tick with the streams decoding now (0 when none decode): what each tick of a new prompt's prefill also pays.", load(&M::decode_step_ms), 0.001},
      {"ttft_ms_last", "time_to_first_token_last_seconds", Type::kGauge, "Time to first token of the last request (-0.001 before any).", load(&M::ttft_ms_last), 0.001},
  };
}

// Who is running, waiting or draining, and the KV cache they hold.
std::vector<Scalar> scalars_occupancy() {
  return {
      {"active_sessions", "num_requests_running", Type::kGauge, "Requests prefilling or decoding.", load(&M::active_sessions)},
      {"queued_sessions", "num_requests_waiting", Type::kGauge, "Requests waiting for KV room.", load(&M::queued_sessions)},
      {"draining", "draining", Type::kGauge, "1 while draining (SIGTERM with --drain-sec): no new requests, those in flight end or move to other agents.", load(&M::draining)},
      {"drain_in_flight", "drain_in_flight_requests", Type::kGauge, "Requests in flight when the drain began.", load(&M::drain_in_flight)},
      {"sessions_waiting", "sessions_waiting", Type::kGauge, "Requests in line for a session slot (--max-queue).",
       load(&M::sessions_waiting)},
      {"prefill_backlog_tokens", "prefill_backlog_tokens", Type::kGauge, "Prompt tokens admitted and not yet prefilled (what a new prompt waits behind).", load(&M::prefill_backlog_tokens)},
      {"kv_tokens_used", "kv_cache_tokens_used", Type::kGauge, "Tokens held in the KV cache.", load(&M::kv_tokens_used)},
      {"kv_sequences_used", "kv_cache_sequences_used", Type::kGauge, "Sequences holding KV.", load(&M::kv_sequences_used)},
      {"kv_cells_total", "kv_cache_cells", Type::kGauge, "KV cells (n_ctx).", load(&M::kv_cells_total)},
      {"kv_cells_granted", "kv_cache_cells_granted", Type::kGauge, "KV cells granted to running requests (their tokens so far).", load(&M::kv_cells_granted)},
  };
}

// What came in, and how the KV cache was kept for it (moves, restores, pauses).
std::vector<Scalar> scalars_requests() {
  return {
      {"requests_total", "requests_total", Type::kCounter, "Requests received.", load(&M::requests_total)},
      {"embedding_requests_total", "embedding_requests_total", Type::kCounter, "Embeddings requests received by the scheduler.", load(&M::embedding_requests_total)},
      {"embedding_tokens_total", "embedding_tokens_total", Type::kCounter, "Input tokens embedded.", load(&M::embedding_tokens_total)},
      {"images_encoded_total", "images_encoded_total", Type::kCounter, "Prompt images run through the vision projector's encoder (--mmproj).", load(&M::images_encoded_total)},
      {"image_cache_hits_total", "image_cache_hits_total", Type::kCounter, "Prompt images whose embeddings came from the cache of recent images (--image-cache-mb).", load(&M::image_cache_hits_total)},
      {"ignored_fields_total", "ignored_fields_total", Type::kCounter, "Request fields no one defined, accepted and ignored (X-Uma-Ignored-Fields).", load(&M::ignored_fields_total)},
      {"inputs_prepared_off_io_total", "inputs_prepared_off_io_total", Type::kCounter, "Request bodies parsed and rendered on the prepare stage's thread, not the I/O thread.", load(&M::inputs_prepared_off_io_total)},
      {"requests_gathered_total", "requests_gathered_total", Type::kCounter, "Requests admitted while the compute thread waited for the rest of a burst before a prefill-only tick (--gather-ms).", load(&M::requests_gathered_total)},
      {"gateway_tokens_total", "gateway_tokens_total", Type::kCounter, "Prompts a gateway sent as token ids (uma.prompt_tokens), not tokenized here.", load(&M::gateway_tokens_total)},
      {"requests_admitted_total", "requests_admitted_total", Type::kCounter, "Requests admitted by the scheduler.", load(&M::requests_admitted_total)},
      {"resumed_total", "resumptions_total", Type::kCounter, "Paused sessions resumed.", load(&M::resumed_total)},
      {"kv_sequence_moves_total", "kv_sequence_moves_total", Type::kCounter, "Per-sequence KV: running sequences moved to a lower id so a decode is one pass.", load(&M::kv_sequence_moves_total)},
      {"kv_restore_fallbacks_total", "kv_restore_fallbacks_total", Type::kCounter, "Saved KV that did not fit back and was recomputed.", load(&M::kv_restore_fallbacks_total)},
      {"kv_exhausted_total", "kv_exhausted_total", Type::kCounter, "Decodes that found no KV cells (recovered by pausing).", load(&M::kv_exhausted_total)},
      {"parked_bytes", "parked_kv_bytes", Type::kGauge, "Host memory held by the KV of paused sessions.", load(&M::parked_bytes)},
  };
}

// The prefix cache, as the JSON object "prefix_cache".
std::vector<Scalar> scalars_prefix_cache() {
  return {
      {"prefix_cache.lookups_total", "prefix_cache_queries_total", Type::kCounter, "Prefix cache lookups.", load(&M::prefix_lookups_total)},
      {"prefix_cache.hits_total", "prefix_cache_hits_total", Type::kCounter, "Prefix cache lookups that reused KV.", load(&M::prefix_hits_total)},
      {"prefix_cache.lookup_tokens_total", "prefix_cache_query_tokens_total", Type::kCounter, "Prompt tokens looked up in the prefix cache.", load(&M::prefix_lookup_tokens_total)},
      {"prefix_cache.reused_tokens_total", "prefix_cache_hit_tokens_total", Type::kCounter, "Prompt tokens served from cached KV.", load(&M::prefix_reused_tokens_total)},
      {"prefix_cache.hit_ratio_tokens", "prefix_cache_hit_tokens_ratio", Type::kGauge, "Share of looked-up prompt tokens served from cached KV.",
       [](const M& m) {
         const auto looked_up = m.prefix_lookup_tokens_total.load();
         return Json(looked_up ? double(m.prefix_reused_tokens_total.load()) / double(looked_up) : 0.0);
       }},
      {"prefix_cache.evictions_total", "prefix_cache_evictions_total", Type::kCounter, "Kept sequences evicted from the KV cache.", load(&M::prefix_evictions_total)},
      {"prefix_cache.not_kept_total", "prefix_cache_not_kept_total", Type::kCounter, "Finished sequences not kept: first block not seen before and short.", load(&M::prefix_not_kept_total)},
      {"prefix_cache.adopted_total", "prefix_cache_adopted_total", Type::kCounter, "Kept streams a request took over in place, nothing copied (per-sequence KV).", load(&M::prefix_adopted_total)},
      {"prefix_cache.kept_sequences", "prefix_cache_kept_sequences", Type::kGauge, "Finished sequences kept in the KV cache.", load(&M::prefix_kept_sequences)},
      {"prefix_cache.kept_cells", "prefix_cache_kept_cells", Type::kGauge, "KV cells held by kept sequences (estimate).", load(&M::prefix_kept_cells)},
      {"prefix_cache.host_snapshots", "prefix_cache_host_snapshots", Type::kGauge, "Kept prefixes held as host snapshots.", load(&M::prefix_host_snapshots)},
      {"prefix_cache.host_bytes", "prefix_cache_host_bytes", Type::kGauge, "Host memory held by prefix snapshots.", load(&M::prefix_host_bytes)},
  };
}

// How requests ended, speculative decoding, SLO misses and connections.
std::vector<Scalar> scalars_outcomes() {
  return {
      {"requests_completed_total", "request_success_total", Type::kCounter, "Requests finished (stop or length).", load(&M::requests_completed_total)},
      {"requests_cancelled_total", "requests_cancelled_total", Type::kCounter, "Requests cancelled or abandoned.", load(&M::requests_cancelled_total)},
      {"prefill_skipped_ticks_total", "prefill_skipped_ticks_total", Type::kCounter, "Ticks whose prefill the latency guard skipped.", load(&M::prefill_skipped_ticks_total)},
      {"pipelined_ticks_total", "pipelined_ticks_total", Type::kCounter, "Decodes launched before the last one's tokens became text (the pipelined tick).", load(&M::pipelined_ticks_total)},
      {"spec_ticks_total", "spec_ticks_total", Type::kCounter, "Ticks that verified draft tokens (speculative decoding).", load(&M::spec_ticks_total)},
      {"spec_declined_ticks_total", "spec_declined_ticks_total", Type::kCounter, "Ticks with drafts that the cost model found not worth verifying.", load(&M::spec_declined_ticks_total)},
      {"spec_verifications_total", "spec_verifications_total", Type::kCounter, "Sessions' drafts verified, one per session and tick (spec_accepted_tokens_total over this: the mean accepted length).", load(&M::spec_verifications_total)},
      {"spec_drafted_total", "spec_drafted_tokens_total", Type::kCounter, "Draft tokens verified.", load(&M::spec_drafted_total)},
      {"spec_accepted_total", "spec_accepted_tokens_total", Type::kCounter, "Draft tokens accepted.", load(&M::spec_accepted_total)},
      {"spec_draft_ms_total", "spec_draft_seconds_total", Type::kCounter, "Time the draft model spent drafting.", load(&M::spec_draft_ms_total), 0.001},
      {"spec_overhead_ms", "spec_overhead_seconds", Type::kGauge, "What a verifying tick costs beyond its rows (a GPU's graph builds), learnt per number of streams: the last verifying tick's; speculation must pay for it.", load(&M::spec_overhead_ms), 0.001},
      {"spec_draft_call_ms", "spec_draft_call_seconds", Type::kGauge, "The draft model's measured cost of a call beyond its steps (catch-up, graph builds), for the last call's number of sequences (the last measured).", load(&M::spec_draft_call_ms), 0.001},
      {"spec_draft_step_ms", "spec_draft_step_seconds", Type::kGauge, "The draft model's measured step (one token for every session drafting).", load(&M::spec_draft_step_ms), 0.001},
      {"ttft_slo_miss_total", "ttft_slo_misses_total", Type::kCounter, "First tokens later than their request's target.", load(&M::ttft_slo_miss_total)},
      {"tbt_slo_miss_total", "tbt_slo_misses_total", Type::kCounter, "Tokens later than their stream's inter-token target.", load(&M::tbt_slo_miss_total)},
      {"connections_accepted_total", "connections_accepted_total", Type::kCounter, "Connections accepted.", load(&M::connections_accepted_total)},
      {"accept_pauses_total", "accept_pauses_total", Type::kCounter, "Times accepting paused (out of descriptors or memory) and backed off.", load(&M::accept_pauses_total)},
      {"tx_drops_total", "tx_drops_total", Type::kCounter, "Connections dropped for reading too slowly.", load(&M::tx_drops_total)},
      {"disconnects_mid_stream_total", "disconnects_mid_stream_total", Type::kCounter, "Clients gone while their request ran.", load(&M::disconnects_mid_stream_total)},
      {"idle_timeouts_total", "idle_timeouts_total", Type::kCounter, "Connections closed for idling.", load(&M::idle_timeouts_total)},
  };
}

// Every scalar, in the order both outputs list them.
const std::vector<Scalar>& scalars() {
  static const std::vector<Scalar> table = [] {
    std::vector<Scalar> all;
    for (auto* group : {scalars_compute, scalars_occupancy, scalars_requests, scalars_prefix_cache, scalars_outcomes}) {
      std::vector<Scalar> g = group();
      all.insert(all.end(), std::make_move_iterator(g.begin()), std::make_move_iterator(g.end()));
    }
    return all;
  }();
  return table;
}

std::uint64_t gauge_value(const std::atomic<std::int64_t>& g) {
  return static_cast<std::uint64_t>(std::max<std::int64_t>(0, g.load()));
}

constexpr std::array<const char*, kGaugeStates> kGaugeStateNames = {"queued", "prefill", "decode", "paused"};

const std::vector<Family>& families() {
  static const std::vector<Family> table = {
      {"rejected_total", "requests_rejected_total", Type::kCounter, "reason", "Requests turned away by admission control, by reason.",
       [](const M& m, auto& out) {
         for (std::size_t i = 0; i < kRejectReasons; ++i) {
           const auto r = static_cast<RejectReason>(i);
           out.emplace_back(std::string(reject_reason_name(r)), m.rejected(r));
         }
       }},
      {"sessions_by_state", "num_requests", Type::kGauge, "state", "Requests by scheduler state.",
       [](const M& m, auto& out) {
         for (std::size_t i = 0; i < kGaugeStates; ++i) {
           out.emplace_back(kGaugeStateNames[i], static_cast<std::uint64_t>(std::max<std::int64_t>(0, m.sessions_by_state[i].load())));
         }
       }},
      {nullptr, "preemptions_total", Type::kCounter, "kv", "Sessions paused for other work, by what happened to their KV.",
       [](const M& m, auto& out) {
         out.emplace_back("saved", m.preempted_saved_total.load());
         out.emplace_back("dropped", m.preempted_recomputed_total.load());
       },
       {"preempted_saved_total", "preempted_recomputed_total"}},
      {nullptr, "preemptions_by_cause_total", Type::kCounter, "cause", "Sessions paused, by why.",
       [](const M& m, auto& out) {
         out.emplace_back("kv_full", m.preempted_kv_full_total.load());
         out.emplace_back("priority", m.preempted_priority_total.load());
       },
       {"preempted_kv_full_total", "preempted_priority_total"}},
      // Per front end (one label; the JSON keeps its older top-level keys).
      {nullptr, "connections_open", Type::kGauge, "front_end", "Open client connections, by front end.",
       [](const M& m, auto& out) {
         out.emplace_back("unix_socket", gauge_value(m.connections_open));
         out.emplace_back("http", gauge_value(m.http_connections_open));
       },
       {"connections_open", "http_connections_open"}},
      {nullptr, "sessions_open", Type::kGauge, "front_end",
       "Requests holding one of the daemon's session slots (--max-sessions, shared), by front end.",
       [](const M& m, auto& out) {
         out.emplace_back("unix_socket", gauge_value(m.sessions_open));
         out.emplace_back("http", gauge_value(m.http_sessions_open));
       },
       {"sessions_open", "http_sessions_open"}},
      {nullptr, "connections_rejected_total", Type::kCounter, "front_end",
       "Connections closed at once: over --max-connections, by front end.",
       [](const M& m, auto& out) {
         out.emplace_back("unix_socket", m.connections_rejected_total.load());
         out.emplace_back("http", m.http_connections_rejected_total.load());
       },
       {"connections_rejected_total", "http_connections_rejected_total"}},
      {"errors_total", "errors_total", Type::kCounter, "kind", "Errors by kind.",
       [](const M& m, auto& out) {
         for (std::size_t i = 1; i < M::kErrorKinds; ++i) {
           const auto code = static_cast<ErrorCode>(i);
           out.emplace_back(std::string(error_code_name(code)), m.errors(code));
         }
       }},
  };
  return table;
}

const std::vector<Hist>& histograms() {
  static const std::vector<Hist> table = {
      {"ttft_ms", "time_to_first_token_seconds", "Request received to first token.", &M::ttft_ms, 0.001},
      {"inter_token_ms", "inter_token_latency_seconds", "Gap between consecutive tokens of a stream.", &M::inter_token_ms, 0.001},
      {"queue_ms", "request_queue_time_seconds", "Request received to prefill start.", &M::queue_ms, 0.001},
      {"decode_ms", "decode_duration_seconds", "Duration of one llama_decode (one tick).", &M::decode_ms, 0.001},
      {"batch_tokens", "batch_tokens", "Tokens in one decode.", &M::batch_tokens, 1.0},
      {"prefill_chunk", "prefill_chunk_tokens", "Prompt tokens of one prefill chunk.", &M::prefill_chunk, 1.0},
      {"paused_ms", "pause_duration_seconds", "Time one paused session waited to resume (or to end).", &M::paused_ms, 0.001},
  };
  return table;
}

// The JSON object a dotted key lives in, and its last part.
std::pair<Json*, std::string> json_slot(Json& root, std::string_view key) {
  Json* at = &root;
  std::size_t dot;
  while ((dot = key.find('.')) != std::string_view::npos) {
    at = &(*at)[std::string(key.substr(0, dot))];
    key.remove_prefix(dot + 1);
  }
  return {at, std::string(key)};
}

prom::Type prom_type(Type type) { return type == Type::kCounter ? prom::Type::kCounter : prom::Type::kGauge; }

std::string prom_number(const Json& v, double scale) {
  if (v.is_number_integer() && scale == 1.0) return v.dump();
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v.get<double>() * scale);
  return buf;
}

}  // namespace

std::string ServerMetrics::to_json() const {
  Json j = Json::object();
  for (const Scalar& m : scalars()) {
    auto [obj, key] = json_slot(j, m.json);
    (*obj)[key] = m.read(*this);
  }
  std::vector<std::pair<std::string, std::uint64_t>> samples;
  for (const Family& f : families()) {
    samples.clear();
    f.read(*this, samples);
    for (std::size_t i = 0; i < samples.size(); ++i) {
      if (f.json_object != nullptr) j[f.json_object][samples[i].first] = samples[i].second;
      else j[f.json_keys.at(i)] = samples[i].second;
    }
  }
  auto& hist = j["histograms"] = Json::object();
  for (const Hist& h : histograms()) {
    const Histogram::Snapshot s = (this->*h.member).snapshot();
    hist[h.json] = Json{{"count", s.count}, {"sum", s.sum}, {"p50", Histogram::quantile(s, 0.5)},
                        {"p90", Histogram::quantile(s, 0.9)}, {"p99", Histogram::quantile(s, 0.99)}};
  }
  auto& list = j["sessions"] = Json::array();
  {
    std::lock_guard<std::mutex> lock(sessions_mu_);
    for (const SessionTiming& s : sessions_) {
      list.push_back({{"id", s.id}, {"state", s.state}, {"priority", s.background ? "background" : "interactive"},
                      {"preemptions", s.preemptions}, {"prompt_tokens", s.prompt_tokens},
                      {"prefilled", s.prefilled}, {"generated", s.generated}, {"kv_tokens", s.kv_tokens},
                      {"queue_ms", s.queue_ms}, {"ttft_ms", s.ttft_ms}, {"tbt_ms_ewma", s.tbt_ms_ewma},
                      {"tbt_ms_max", s.tbt_ms_max}, {"bytes_per_token", s.bytes_per_token}});
    }
  }
  return to_json_text(j);
}

std::string ServerMetrics::to_prometheus() const {
  // The per-session table stays in the JSON snapshot: one series per request would be unbounded.
  std::string out;
  for (const Hist& h : histograms()) {
    prom::histogram(out, std::string("uma_") + h.prom, h.help, (this->*h.member).snapshot(), h.prom_scale);
  }
  for (const Scalar& m : scalars()) {
    const std::string name = std::string("uma_") + m.prom;
    prom::family(out, name, m.help, prom_type(m.type));
    out += name + ' ' + prom_number(m.read(*this), m.prom_scale) + '\n';
  }
  std::vector<std::pair<std::string, std::uint64_t>> samples;
  for (const Family& f : families()) {
    const std::string name = std::string("uma_") + f.prom;
    prom::family(out, name, f.help, prom_type(f.type));
    samples.clear();
    f.read(*this, samples);
    for (const auto& [label, value] : samples) prom::sample(out, name, std::string(f.label) + "=\"" + label + "\"", value);
  }
  return out;
}

}  // namespace uma
