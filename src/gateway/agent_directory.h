// AgentDirectory: what one gateway knows about the agents, and the one place it is kept.
// - The agents come from the cluster view (Redis, refreshed by the caller: update()); one gone
//   from the view (its key expired: dead or hung for ~3 s) is dropped and on_gone() is told, so
//   requests still waiting on it move elsewhere.
// - For each agent the directory holds its KV-event stream (publish/kv_event_server.h: GET
//   /kv-events through an Upstream): the prefix blocks it holds and its load, fresher than its
//   heartbeat. An agent is a candidate only while that stream is live: a stream that breaks
//   (a killed agent's kernel closes it at once) takes it out of routing at once; it is dialled
//   again every redial period while the view still lists it. A stream that stays open but says
//   nothing (no ping for `silent`) is a hung agent: check_streams(), every `check_every`, takes it
//   out. Silence counts only time this gateway was listening: when the I/O thread itself was away
//   longer than `loop_stall` between two checks (a long handler, the process descheduled, a
//   sanitizer's slowdown), the agents' pings may sit unread in the socket, so that gap counts as
//   `loop_stall` only (measured: two gateways under TSan tokenizing fifty 6000-token prompts on
//   their I/O threads were away ~8 s and took all three healthy agents for hung).
// - A circuit breaker per agent: `breaker_failures` failed requests in a row open it for
//   `breaker_open` (no requests), after which one request may try again.
// - This gateway's own dispatches: until their first byte, the prompt tokens an agent has not yet
//   reported in its load (routing's pending_tokens). A report covers a dispatch once the agent's
//   admitted count (in the report) reaches the count expected for it: a report merely received
//   after the dispatch may have been measured before the agent admitted it (its gauges lag by up
//   to a tick, seconds during a long CPU prefill). Until they end, their prompt's blocks count
//   as held there (the agent will hold them once it admits the request and says so on its stream:
//   without this, requests of one prefix arriving together would each look cold everywhere and
//   be spread over the agents, each paying the whole prefill).
// - Room: an agent takes max_sessions requests at once (its beat says how many) and refuses the
//   next with a 429. The directory counts its sessions (the last load report plus this gateway's
//   dispatches it does not cover yet) and leaves a full agent out of the candidates; one that answered 429 anyway
//   (another gateway filled it) counts as full until its next load report. When a dispatch ends
//   or a report comes, on_room() is told: the gateway's queue may move.
// - Each agent's measured TTFTs (gateway/ttft_fit.h), which routing's prediction learns from.
// candidates() builds routing's input (gateway/routing.h) for one prompt.
//
// Threading: the I/O thread of `io`, all of it. Lifetime: `io` must not run handlers after the
// directory is destroyed (its check timer's last completion may still be queued). Ownership: the directory owns its links and their
// streams; AgentLink pointers handed out stay valid until the next update() or the directory's end.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "cluster/agent_state.h"
#include "cluster/loader_state.h"
#include "cluster/kv_events.h"
#include "gateway/routing.h"
#include "gateway/dispatch_policy.h"
#include "gateway/sse_events.h"
#include "httpkit/upstream.h"

namespace uma::gateway {

using SteadyClock = std::chrono::steady_clock;

struct DirectoryOptions {
  std::chrono::milliseconds redial{250};
  // A live stream silent this long (pings come every 500 ms) is a hung agent.
  std::chrono::milliseconds silent{2000};
  // How often check_streams() runs once start() is called, and the gap between two checks that
  // means the I/O thread was away (more than a ping's interval: a ping may have gone unread).
  std::chrono::milliseconds check_every{100};
  std::chrono::milliseconds loop_stall{500};
  std::int32_t breaker_failures = 3;
  std::chrono::milliseconds breaker_open{5000};
  Upstream::Options upstream;
};

class AgentDirectory;

class AgentLink final : private UpstreamSink {
 public:
  AgentLink(AgentDirectory& dir, cluster::AgentState state);
  ~AgentLink() override;
  const cluster::AgentState& state() const { return state_; }
  const std::string& id() const { return state_.id; }
  bool live() const { return live_; }
  bool breaker_open(SteadyClock::time_point now) const { return now < open_until_; }
  // The prompt's leading tokens this agent holds, from its chained block hashes.
  // Counts its stream's blocks and this gateway's requests in flight there.
  std::int64_t cached_tokens(std::span<const std::uint64_t> prompt_blocks) const;
  std::int64_t pending_tokens() const;
  // Requests it is serving or holding now, as far as this gateway can tell; whether one more fits.
  std::int64_t sessions_in_use() const;
  bool has_room(SteadyClock::time_point now) const;
  std::size_t blocks_held() const { return blocks_.size(); }
  // One event of its KV-event stream (its blocks and load); public for tests, which feed them.
  void apply(const cluster::KvEvent& e);
  // Its stream sent something (an event or a ping) at `at`; public for tests.
  void heard(SteadyClock::time_point at) { heard_at_ = at; }
  // Its stream said it is draining: out of routing, not dialled again (a restart is a new boot).
  bool draining() const { return draining_; }

 private:
  friend class AgentDirectory;
  void subscribe(SteadyClock::time_point now);
  void stream_down(const std::string& why, bool hung = false);  // `hung`: told to on_gone
  void on_head(unsigned status, bool event_stream) override;
  void on_body(std::string_view bytes) override;
  void on_end() override { stream_down("stream ended"); }
  void on_failed(const std::string& why, bool) override { stream_down(why); }

  struct Dispatch {
    std::int64_t tokens = 0;  // pending until the first byte, then 0
    SteadyClock::time_point at{};
    std::int64_t admitted_by = 0;  // the agent's admitted count from which its load reports cover this request
    std::vector<std::uint64_t> blocks;  // the prompt's, counted in inflight_blocks_
  };
  AgentDirectory& dir_;
  cluster::AgentState state_;
  std::shared_ptr<Upstream> stream_;
  SseEvents sse_;
  bool live_ = false;  // its stream is up and has sent its snapshot
  bool draining_ = false;
  bool foreign_blocks_ = false;  // its snapshot's blocks are not kBlockTokens long
  SteadyClock::time_point last_dial_{};
  std::unordered_set<std::uint64_t> blocks_;
  std::int64_t admitted_ = 0;  // requests its last load report covers (cluster::AgentLoad::admitted)
  std::int64_t assigned_ = 0;  // the highest Dispatch::admitted_by given
  SteadyClock::time_point heard_at_{};  // when its stream last sent anything
  SteadyClock::duration heard_mark_{};  // the directory's listened_ at the first check after that
  std::int32_t failures_ = 0;
  SteadyClock::time_point open_until_{};
  SteadyClock::time_point full_until_{};  // it answered 429: no room until its next report (or this)
  gateway::TtftFit fit_;                  // its measured TTFTs against what routing knew
  std::unordered_map<std::uint64_t, Dispatch> dispatches_;  // request id -> in flight here
  std::unordered_map<std::uint64_t, std::int32_t> inflight_blocks_;  // block hash -> dispatches holding it
};

class AgentDirectory {
 public:
  // Told when an agent leaves the view (dead or hung) or its stream breaks (`hung`: the former).
  using OnGone = std::function<void(const std::string& id, bool hung)>;
  // Told when an agent may have room for another request (a dispatch ended, a load report came).
  using OnRoom = std::function<void()>;
  AgentDirectory(boost::asio::io_context& io, DirectoryOptions options, OnGone on_gone, OnRoom on_room = {});
  ~AgentDirectory();
  // Told when an agent's stream says it is draining (it stops; its requests should move).
  using OnDraining = std::function<void(const std::string& id)>;
  void set_on_draining(OnDraining f) { on_draining_ = std::move(f); }

  void update(const std::vector<cluster::AgentState>& view, SteadyClock::time_point now);
  // Runs check_streams() every options.check_every on the I/O thread until the directory ends.
  void start();
  // Takes out of routing each live stream silent for `silent` of the time this gateway listened.
  void check_streams(SteadyClock::time_point now);

  struct Candidates {
    std::vector<gateway::Candidate> list;
    std::vector<AgentLink*> links;  // the same order
    std::size_t full = 0;           // agents left out only because they have no room now
  };
  // Live agents serving `model` (empty: any) whose breaker is closed, that have room and are not
  // `exclude`.
  void candidates(std::string_view model, std::span<const std::uint64_t> prompt_blocks,
                  const std::unordered_set<std::string>& exclude, SteadyClock::time_point now, Candidates* out);

  AgentLink* find(const std::string& id);
  // A request sent to `a`: `tokens` of its prompt to compute, `blocks` its prompt's block hashes.
  void dispatched(AgentLink& a, std::uint64_t request, std::int64_t tokens, std::span<const std::uint64_t> blocks,
                  SteadyClock::time_point now);
  void first_byte(AgentLink& a, std::uint64_t request);  // its prompt is computed: no longer pending
  void ended(AgentLink& a, std::uint64_t request);       // done or failed there: forgotten
  void succeeded(AgentLink& a);
  void failed(AgentLink& a, SteadyClock::time_point now);
  void refused_full(AgentLink& a, SteadyClock::time_point now);  // it answered 429
  // A first token came `measured_s` after dispatch, for a request predicted from `p`.
  void measured(AgentLink& a, const gateway::Prediction& p, double measured_s);

  std::size_t size() const { return links_.size(); }
  std::size_t live() const;
  std::vector<std::string> models() const;  // every model the live agents serve
  // The catalog's model ids (cluster/model_catalog.h), from the same Redis reads as the agents.
  void set_catalog(std::vector<std::string> ids) { catalog_ = std::move(ids); }
  // The loaders (uma-agents that load models on demand), from the same reads.
  void set_loaders(std::vector<cluster::LoaderState> loaders) { loaders_ = std::move(loaders); }
  const std::vector<cluster::LoaderState>& loaders() const { return loaders_; }
  const std::vector<std::string>& catalog() const { return catalog_; }
  // What a request naming `model` finds (gateway/dispatch_policy.h): served when a live agent
  // serves it (by name, or by the file name's stem: "m" finds "m.gguf") or it names none; unknown
  // (a 404) when neither an agent nor the catalog has it, while any agent is live.
  using ModelLookup = gateway::ModelLookup;
  ModelLookup lookup(const std::string& model) const;
  // The served name a request's `model` finds ("" when none: any agent).
  std::string served_name(const std::string& model) const;
  // Live agents serving `model` but `except` (an agent id): where its streams could resume.
  std::size_t serving(const std::string& model, const std::string& except) const;
  bool in_catalog(const std::string& model) const { return std::binary_search(catalog_.begin(), catalog_.end(), model); }
  struct AgentSummary {
    std::string id;
    bool live = false;
    std::size_t blocks = 0;  // prefix blocks it holds, from its stream
    std::int64_t sessions = 0;  // requests it serves or holds, as this gateway counts them
  };
  std::vector<AgentSummary> summary() const;
  boost::asio::io_context& io() { return io_; }
  const DirectoryOptions& options() const { return options_; }

 private:
  friend class AgentLink;
  boost::asio::io_context& io_;
  DirectoryOptions options_;
  OnGone on_gone_;
  OnRoom on_room_;
  OnDraining on_draining_;
  std::map<std::string, std::unique_ptr<AgentLink>> links_;
  std::vector<std::string> catalog_;
  std::vector<cluster::LoaderState> loaders_;
  SteadyClock::time_point last_check_{};  // the previous check_streams()
  SteadyClock::duration listened_{};      // time listened to the streams, summed over the checks
  std::unique_ptr<boost::asio::steady_timer> check_timer_;
  void arm_check();
};

}  // namespace uma::gateway
