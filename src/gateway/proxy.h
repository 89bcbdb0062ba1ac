// Proxy: one client request's way through the gateway, from the moment it is parsed and routed
// until its reply is whole. Explicit states (memcached's conn_states; set_state() asserts the
// transitions):
//   kDispatching -> kWaiting (sent to an agent, nothing back yet) -> kRelaying (the agent's reply
//   is flowing to the client) -> kDone
// with these ways back:
// - kDispatching -> kQueued -> kDispatching: every agent that could serve it is full (its
//   max_sessions in use): it waits in the gateway's FIFO (bounded, with a deadline) instead of
//   being refused, and is dispatched again when an agent has room; an agent that answers 429
//   anyway (another gateway filled it) sends it back here without counting as a failure;
// - kDispatching -> kAwaitingModel -> kDispatching: the model is in the catalog and no agent serves
//   it: the gateway has it loaded (gateway/cold_loads.h: one load in the whole cluster) and the
//   request waits (bounded, with the queue's deadline) until an agent serving it is live;
// - kWaiting -> kDispatching: the agent failed before its first byte (unreachable, reset, 5xx):
//   the request goes, once, to the next-best agent (`max_attempts`);
// - kRelaying -> kDispatching: the agent died mid-stream: the request goes to another agent with
//   the token ids the client has already received (uma.resume) and what is left of max_tokens, and
//   that agent's stream continues the client's, same id and all (greedy sampling makes the text
//   what one agent would have written). A request that cannot resume (n > 1, tools, logprobs) ends
//   with an SSE error event, never a silently short stream.
// The agent's SSE is passed through event by event as it arrives (no buffering beyond one event),
// umad's `: tokens` comments taken out; a reply that is not a stream is passed on whole. A relayed
// request (ProxyJob::relay_target) is routed and retried the same way, its answer passed on as it
// comes; it never resumes.
//
// Where a dispatch goes (send, queue, await its model, refuse) is decide_dispatch()'s
// (gateway/dispatch_policy.h: pure, unit-tested); the proxy carries it out.
// Threading: the gateway's I/O thread. Ownership: the GatewayServer owns proxies (one per client
// connection at a time) and retires them outside their own callbacks.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include "gateway/routing.h"
#include "gateway/agent_directory.h"
#include "gateway/reencode.h"
#include "gateway/sse_events.h"
#include "httpkit/upstream.h"
#include "httpkit/request_server.h"

namespace uma::gateway {

class GatewayServer;

// What routing and forwarding need to know of a request, from the gateway's parse of it.
struct ProxyJob {
  bool chat = false;
  bool stream = false;
  bool resumable = false;            // n = 1, no tools, no logprobs
  std::optional<std::int32_t> max_tokens;
  std::string model;                 // as the client named it (empty: any)
  std::string body;                  // the client's JSON body
  std::int64_t prompt_tokens = 0;
  std::vector<std::int32_t> prompt_ids;  // sent to the agent (uma.prompt_tokens); empty: it tokenizes
  std::vector<std::uint64_t> blocks;  // the prompt's chained 32-token block hashes
  std::string completion_id;
  std::int64_t created = 0;
  std::chrono::steady_clock::time_point received_at{};  // the request was whole
  // A client of another API (Anthropic's, Responses'): `body` is the OpenAI chat body it runs as,
  // and the answer is written in the client's API (gateway/reencode.h).
  std::shared_ptr<Reencoder> reencoder;
  // What only a model's own server can answer (embeddings, reranking, /api/show, /infill): `body`
  // goes as it came to this path of the agent, and its answer (whole or a stream) comes back as it
  // is. Empty: a completion.
  std::string relay_target;
  // The client API's error body where it is not OpenAI's (Ollama's), for errors the gateway writes.
  std::string (*error_body)(const Status&) = nullptr;
};

enum class ProxyState : std::uint8_t { kDispatching, kQueued, kAwaitingModel, kWaiting, kRelaying, kDone };

class Proxy final : private UpstreamSink {
 public:
  Proxy(GatewayServer& gw, HttpExchangePtr client, std::uint64_t id, ProxyJob job);
  ~Proxy() override;
  void start() { dispatch(); }
  ProxyState state() const { return state_; }
  const std::string& agent() const { return agent_; }
  // The agent it waits on is gone (hung): fail over as if its connection had broken.
  void agent_gone();
  void client_gone();  // the client left: the agent's request is dropped (the agent cancels it)
  // Live migration: leave the agent for another serving its model (resumed token-exactly, as after
  // a failure, but planned: no retry or resume limit applies). `exclude`: the agent is not tried
  // again for this request (it makes room for a load); a draining agent is out of routing anyway and
  // may serve the request again once restarted. False when it cannot (not at an agent, or
  // mid-stream and not resumable).
  bool migrate(const std::string& why, bool exclude = true);
  // Queued: an agent may have room now (dispatch again; it may queue again, at the front).
  void wake() { dispatch(); }
  // Queued for longer than the gateway's queue deadline.
  void queue_expired();
  // Awaiting its model: an agent serves it now (dispatch again), or it waited too long (`why`).
  void model_ready() { dispatch(); }
  void model_wait_expired(const std::string& why);
  const std::string& model() const { return job_.model; }
  std::chrono::steady_clock::time_point queued_at() const { return queued_at_; }

 private:
  void set_state(ProxyState to);
  void dispatch();
  std::string upstream_request(const AgentLink& a) const;
  void failover(const std::string& why, bool planned = false, bool exclude = true);
  void finish_stream();
  void end_with_error(const Status& st);
  void done();
  void on_sent() override;
  void on_head(unsigned status, bool streamed) override;
  void on_body(std::string_view bytes) override;
  void relay_stream(std::string_view bytes);
  void on_end() override;
  void record_ttft();
  void leave_agent();  // the directory forgets this request's dispatch to agent_
  void on_failed(const std::string& why, bool before_head) override;

  GatewayServer& gw_;
  HttpExchangePtr client_;
  std::uint64_t id_;
  ProxyJob job_;
  ProxyState state_ = ProxyState::kDispatching;
  std::shared_ptr<Upstream> up_;
  std::string agent_;                      // the agent of the attempt in flight
  std::unordered_set<std::string> tried_;  // agents that failed this request
  std::int32_t attempts_ = 0;              // dispatches before any byte reached the client
  std::int32_t resumes_ = 0;
  std::int32_t moves_ = 0;                 // planned moves (live migration, drains)
  SseEvents sse_;
  unsigned status_ = 0;                    // the agent's reply
  bool agent_stream_ = false;
  std::string whole_;                      // a reply that is not a stream, collected
  bool client_head_sent_ = false;
  bool done_seen_ = false;                 // the agent's [DONE]
  std::vector<std::int32_t> emitted_;      // token ids whose text the client has
  // Predicted vs measured time to first token (from dispatch to the first token event).
  std::chrono::steady_clock::time_point dispatched_at_{};
  std::chrono::steady_clock::time_point queued_at_{};  // it first waited for room
  gateway::Prediction predicted_;
  std::int64_t cached_tokens_ = 0;         // of the prompt, on the chosen agent
  bool first_token_ = false;
};

}  // namespace uma::gateway
