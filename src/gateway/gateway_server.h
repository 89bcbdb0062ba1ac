// GatewayServer: uma-gw's OpenAI-compatible front end (POST /v1/completions and
// /v1/chat/completions, GET /v1/models (the cluster's models), /health, /metrics; what needs a
// model's weights (embeddings, reranking, /infill, Ollama's /api/embed and /api/show) relayed
// whole to an agent serving the model it names, routed as completions are). Stateless: what
// it knows of the cluster is the AgentDirectory's (Redis view + the agents' KV-event streams), so
// any number of gateways can run side by side.
//
// A completion is parsed and checked exactly as umad checks it (http_route::route, the same field
// table and errors: a bad request never reaches an agent), its prompt rendered with its model's
// chat template and tokenized with its model's vocabulary (gateway/vocab_cache.h) as an agent will, cut
// into the same chained block hashes (kBlockTokens), and routed (gateway/routing.h) over the live agents;
// a Proxy (gateway/proxy.h) then carries it. Every routed request records the predicted and
// measured time to first token.
//
// Caps: max_connections open client connections (more are closed at once), a request's header and
// body, unsent reply bytes per client (a slow reader is dropped), a whole request within
// timeout_sec of the connection becoming idle, max_queue requests waiting for room while every
// agent is full (more get 429 at once), each for queue_timeout_ms at most (then 429). Waiting
// requests go out first come, first served when the directory says an agent may have room.
//
// Threading: the I/O thread of `io`, all of it (the Redis refresher posts its view onto it), but
// preparing a completion: its parse, chat rendering, tokens and block hashes are computed on `tokenize_threads` threads of its
// own (milliseconds for a long prompt, seconds under a sanitizer: on the I/O thread a burst of long
// prompts stalled every stream through the gateway and the agents' event streams, measured ~5 s
// under TSan; a vocabulary not yet resident is loaded there too), which only read the vocabularies
// (llama-server tokenizes on its HTTP threads too), and
// the result comes back to the I/O thread; the connection is busy meanwhile.
// Ownership: owns its client connections and their proxies; the directory and the vocabularies are
// the caller's and outlive it. Lifetime: `io` must not run handlers after the server is destroyed
// (a tokenizer's result may still be queued there: uma-gw stops `io` first).
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "gateway/routing.h"
#include "gateway/agent_directory.h"
#include "gateway/cold_loads.h"
#include "gateway/dispatch_policy.h"
#include "gateway/fan_out.h"
#include "gateway/model_pull.h"
#include "gateway/proxy.h"
#include "http/http_router.h"
#include "metrics/histogram.h"
#include "httpkit/request_server.h"
#include "gateway/vocab_cache.h"

namespace uma::gateway {

struct GatewayConfig {
  std::string host = "127.0.0.1";
  std::uint16_t port = 8000;  // 0: any free one
  std::int32_t max_connections = 1024;
  std::size_t max_body_bytes = std::size_t{32} << 20;  // --http-max-body-kib: images of several MiB
  std::size_t max_header_bytes = 16 * 1024;
  std::size_t max_tx_bytes = 1 << 20;
  std::int32_t timeout_sec = 30;
  gateway::Policy policy = gateway::Policy::kPredicted;
  gateway::RoutingParams routing;
  std::int32_t max_attempts = 2;  // dispatches of a request before its first byte (a retry: 2)
  std::int32_t max_resumes = 2;   // mid-stream failovers of one request
  std::int32_t max_queue = 4096;  // requests waiting for room on a full cluster
  std::int32_t queue_timeout_ms = 60000;
  // Threads that tokenize prompts (and hash their blocks) off the I/O thread.
  std::int32_t tokenize_threads = 2;
  std::string agent_key;  // --agent-key-file: sent to agents (completions) and loaders (loads)
  FanOutOptions fan_out;  // busy catalog models prefetched to more loaders (with loads on demand)
  openai::Limits limits;
  SamplingParams default_sampling;
  // --api-key / --api-key-file: what a client must send (Bearer or x-api-key; /health is open).
  std::string api_key;
  // --cors-origin: "*" or one origin browsers may call from (httpkit/access.h).
  std::string cors_origin;
  bool webui = true;  // --no-webui: no web page at / (webui/webui.h)
  // Agents run the prompt tokens computed here (uma.prompt_tokens) rather than tokenizing again
  // (--agents-tokenize: off).
  bool forward_tokens = true;
};

struct GatewayMetrics {
  std::uint64_t requests_total = 0;
  std::uint64_t bad_requests_total = 0;   // answered by the gateway itself (4xx)
  std::uint64_t abandoned_total = 0;      // its client left while its prompt was tokenized
  std::uint64_t retries_total = 0;        // re-dispatched before the first byte
  std::uint64_t resumes_total = 0;        // resumed mid-stream on another agent
  std::uint64_t failed_total = 0;         // ended with an error the gateway wrote (503, SSE error)
  std::uint64_t unavailable_total = 0;    // no agent could take it
  std::uint64_t overloaded_total = 0;     // refused or timed out in the queue (429)
  std::uint64_t queued_total = 0;         // waited for room
  std::uint64_t agent_full_total = 0;     // an agent answered 429 (the request went elsewhere or waited)
  std::uint64_t awaited_model_total = 0;  // waited for its model to be loaded somewhere
  std::uint64_t migrated_total = 0;       // moved to another agent to make room for a load (live migration)
  std::uint64_t drain_moved_total = 0;    // moved off an agent that said it is draining
  std::uint64_t drain_left_total = 0;     // left to finish on a draining agent: none other serves its model
  Histogram model_wait_ms{latency_ms_bounds()};  // how long those waited
  Histogram queue_wait_ms{latency_ms_bounds()};
  Histogram route_us{{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 5000}};
  // Request whole -> its bytes on the way to the agent (parse, check, render, tokenize, route, connect).
  Histogram added_us{{25, 50, 75, 100, 150, 200, 300, 400, 500, 750, 1000, 1500, 2000, 5000, 10000}};
  Histogram ttft_ms{latency_ms_bounds()};
  // |predicted - measured| / measured, of the time to first token.
  Histogram ttft_error{{0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 2.0, 5.0}};
  std::deque<double> ttft_errors;  // the last kKeep signed errors (predicted/measured - 1), for the median
  static constexpr std::size_t kKeep = 4096;
};

class GatewayServer final {
 public:
  using ChatTemplate = http_route::ChatTemplate;
  GatewayServer(boost::asio::io_context& io, GatewayConfig config, AgentDirectory& agents, VocabCache& vocabs,
                SchemaToGrammar schema_to_grammar, ColdLoads* cold_loads = nullptr);
  ~GatewayServer();

  Status listen() { return server_.listen(); }
  std::uint16_t port() const { return server_.port(); }
  void start();
  void stop();
  void agent_gone(const std::string& id, bool hung);  // the directory's news
  // Live migration: this gateway's requests at agent `agent` go to other agents serving its model.
  std::size_t move_streams(const std::string& agent, const std::string& why);
  // Agent `id` said it is draining: each request there moves to another agent serving its model;
  // one whose model no other agent serves finishes where it is.
  void agent_draining(const std::string& id);
  // The requests in flight at `agent` (not yet done): what its failure, move or drain acts on.
  std::vector<Proxy*> proxies_at(const std::string& agent) const;
  // A graceful stop (SIGTERM): /health says 503 "draining", the listener closes, idle client
  // connections close and busy ones after their answer; what is in flight is carried to its end.
  // idle() once nothing is left (then stop()).
  void drain_clients();
  bool draining() const { return server_.draining(); }
  bool idle() const { return inflight_.empty() && server_.connections() == 0; }
  void kick();  // an agent may have room: the queue moves (soon, outside the caller's stack)
  // The queue of requests waiting for room (Proxy's kQueued): `front` for one woken that still
  // found none (it keeps its place).
  // --max-queue bounds both: requests waiting for room and those waiting for their model.
  std::size_t waiting() const { return waiting_.size(); }
  std::size_t max_waiting() const { return waiting_.max_waiting(); }
  void enqueue(Proxy* p, bool front);
  void dequeue(Proxy* p);
  // Loads on demand (gateway/cold_loads.h): a request whose model no agent serves waits for it
  // (Proxy's kAwaitingModel) while one load runs somewhere; on with a ColdLoads and a loader.
  bool loads_on_demand() const { return cold_loads_ != nullptr && !agents_.loaders().empty(); }
  void await_model(Proxy* p);
  void stop_awaiting(Proxy* p);

  const GatewayConfig& config() const { return config_; }
  AgentDirectory& agents() { return agents_; }
  GatewayMetrics& metrics() { return metrics_; }
  boost::asio::io_context& io() { return io_; }
  UpstreamPool& upstream_pool() { return upstream_pool_; }  // kept-alive connections to agents
  std::uint64_t* rr_cursor() { return &rr_cursor_; }
  void record_ttft(double predicted_s, double measured_s);
  // The proxy of `client` has finished its reply: the exchange ends (the server serves the
  // connection's next request, or closes it).
  void proxy_done(const HttpExchangePtr& client);
  std::string metrics_text();
  void write_request_metrics(std::string& out);  // gateway_metrics.cc: the page's parts
  void write_load_metrics(std::string& out);
  void write_agent_metrics(std::string& out);
  void write_latency_metrics(std::string& out);

 private:
  struct Prepared;  // a request on its way through a tokenizer thread (cancelled if its client goes)
  // A request the server handed over, until its answer is whole.
  struct InFlight {
    HttpExchangePtr exchange;
    std::shared_ptr<Prepared> preparing;  // being tokenized (off the I/O thread)
    std::unique_ptr<Proxy> proxy;         // carried to an agent
  };
  void handle(const HttpExchangePtr& ex);
  void pull(const HttpExchangePtr& ex);
  void client_gone(HttpExchange* ex);
  http_route::Context route_context(const ChatTemplate* chat_template) const;
  void prepare(Prepared& p);                          // on a tokenizer thread
  void prepared(HttpExchange* ex, Prepared& p);  // back on the I/O thread: route and send it
  void relay(InFlight& entry, Prepared& p);           // embeddings, reranking, /api/show, /infill
  Status servable(const std::string& model);
  std::string dispatch_name(const std::string& model) const;
  void retire(std::unique_ptr<Proxy> p);
  void sweep();  // every second: queue timeouts, loads to prefetch, and a retry of the queue
  void drain();

  boost::asio::io_context& io_;
  GatewayConfig config_;
  AgentDirectory& agents_;
  VocabCache& vocabs_;
  SchemaToGrammar schema_to_grammar_;
  UpstreamPool upstream_pool_;
  // Requests in flight, by exchange. Declared before the server, so they outlive its connections.
  std::unordered_map<HttpExchange*, InFlight> inflight_;
  ModelPulls pulls_;  // Ollama's /api/pull, holding exchanges as inflight_ does
  RequestServer server_;
  boost::asio::steady_timer sweep_timer_;
  boost::asio::thread_pool tokenizers_;  // stopped and joined in the destructor, after stop()
  std::uint64_t next_request_ = 1;
  std::string id_prefix_;  // completion ids: unique across gateways
  GatewayMetrics metrics_;
  std::uint64_t rr_cursor_ = 0;
  // kQueued (oldest first) and kAwaitingModel proxies (owned by their clients).
  WaitLists<Proxy*> waiting_;
  FanOut fan_out_;
  ColdLoads* cold_loads_ = nullptr;
  void wake_awaiting();
  bool kick_posted_ = false;
  bool stopped_ = true;
};

}  // namespace uma::gateway
