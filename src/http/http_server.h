// HttpServer: the OpenAI-compatible HTTP/1.1 front end (POST /v1/completions,
// POST /v1/chat/completions, GET /v1/models, GET /health, GET /metrics), one more protocol on the
// same I/O loop, scheduler and events as the Unix socket. Requests are read with httpkit's
// RequestReader (bounded header and body), answered with SSE (`data:` chunks, `data: [DONE]`) or
// one JSON body, under httpkit's access policy (key, CORS).
//
// Threading: the I/O thread. A listener on the daemon's one server (net/stream_server.h:
// connections, caps, session slots, close-with-cancel, the idle timer, shutdown, the compute
// thread's events); what is HTTP's own is its adapter (http_server.cc): the request reader fed the bytes
// as they arrive, the router, and the encoding of events
// as SSE chunks or one JSON body. Per connection: reading a request (it must arrive whole within
// --http-timeout-sec of the connection becoming idle, or the connection closes) -> running a
// completion (the read stays armed, so a client that goes away, EOF included, cancels its request
// at once) -> idle again (keep-alive; a pipelined request is parsed then) or closing.
// Caps: --max-connections open connections, a request's header and body size, unsent reply bytes
// (a slow reader is dropped), and the daemon's session slots for completions in flight.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <memory>
#include <vector>

#include "common/status.h"
#include "http/http_router.h"
#include "http/openai.h"
#include "httpkit/access.h"
#include "webui/webui.h"
#include "metrics/server_metrics.h"
#include "net/accept_loop.h"
#include "net/session_slots.h"
#include "net/stream_server.h"
#include "serve/io_boundary.h"

namespace uma {

struct HttpConfig {
  std::string host = "127.0.0.1";
  // --host A,B (llama-server's): listeners on these too, on the port `host` bound. With several
  // addresses an IPv6 one binds IPv6 only, so "0.0.0.0,::" means both families.
  std::vector<std::string> more_hosts;
  std::uint16_t port = 8080;                  // 0: any free port (see port())
  std::size_t max_body_bytes = 1 << 20;
  std::size_t offload_body_bytes = 4096;     // larger bodies are parsed and rendered off the I/O thread
  std::int32_t timeout_sec = 30;              // to receive a whole request; idle keep-alive too
  std::size_t max_header_bytes = 16 * 1024;
  std::int32_t max_connections = 256;         // open HTTP connections; more are closed at once
  std::size_t max_tx_bytes = 1 << 20;         // unsent reply bytes (queued and in flight) before a slow reader is dropped
  openai::Limits limits;
  SamplingParams default_sampling;
  SchemaToGrammar schema_to_grammar;          // response_format json_object / json_schema
  // --api-key-file: every request but GET /health needs "Authorization: Bearer KEY" (401 without).
  std::string api_key;
  // --cors-origin: "*" (the default, as llama-server's) or one origin browsers may call from
  // (Access-Control-Allow-Origin; OPTIONS preflights answered); empty: no CORS headers.
  std::string cors_origin = "*";
  bool slots_endpoint = true;    // --no-slots: GET /slots answers 501, as llama-server's
  bool metrics_endpoint = true;  // --no-metrics: GET /metrics answers 501
  bool webui = true;             // --no-webui: no web page at / (webui/webui.h)
};

// What every connection's adapter reads: the configuration and the model's state.
// llama-server's --host and --port: `hosts` comma-separated (the first is `host`, the rest
// `more_hosts`; "" keeps `host`), `port` < 0 keeps `port`. A Unix socket path (HTTP on a socket
// file, as llama-server takes "x.sock") is an error: umad's socket speaks its own protocol.
Status parse_http_hosts(const std::string& hosts, int port, HttpConfig* out);

struct HttpSite {
  HttpSite(HttpConfig c, ServerMetrics& m)
      : config(std::move(c)), metrics(m), access{config.api_key, config.cors_origin, {"/health"}} {
    if (config.webui) access.open_paths.insert(access.open_paths.end(), std::begin(webui::kPaths), std::end(webui::kPaths));
  }
  HttpConfig config;
  ServerMetrics& metrics;
  AccessPolicy access;
  bool ready = false;  // the model is loaded
  bool shutting_down = false;
  std::string model_id = "umad";
  http_route::ChatTemplate chat_template;
  http_route::Tokenize tokenize;   // empty: /tokenize and the like are a 404
  http_route::TokenText token_text;
  http_route::CountWithImages count_with_images;
  http_route::ModelFacts facts;
};

class HttpServer final {
 public:
  using ChatTemplate = http_route::ChatTemplate;

  // Its connections are served by `serving` (whose session slots the Unix socket shares); the
  // listener must outlive them (their adapters read its site).
  HttpServer(boost::asio::io_context& io, HttpConfig config, ServerMetrics& metrics, StreamServer& serving);
  ~HttpServer();

  Status listen();                   // binds and listens (before the model loads: /health says 503)
  std::uint16_t port() const;        // the bound port (every address's)
  void start();                      // accepts
  // Caps from the context (before set_ready): a prompt's bytes and a request body's.
  void set_request_limits(std::size_t max_prompt_bytes, std::size_t max_body_bytes);
  // The model is loaded: completions are served from now on.
  void set_ready(std::string model_id, ChatTemplate chat_template);
  // The model's vocabulary on the I/O thread (/tokenize, /detokenize, count_tokens) and what
  // /v1/models, /props and /slots tell; before set_ready.
  void set_vocabulary(http_route::Tokenize tokenize, http_route::TokenText token_text, http_route::ModelFacts facts,
                      http_route::CountWithImages count_with_images = {});
  // Stop accepting (/health says shutting down; the server ends what is open).
  void stop_accepting();

 private:
  struct Listener;  // an acceptor and its accept loop, one per address
  Status listen_on(const std::string& host, std::uint16_t port, bool v6_only);

  boost::asio::io_context& io_;
  StreamServer& serving_;
  HttpSite site_;
  std::vector<std::unique_ptr<Listener>> listeners_;
};

}  // namespace uma
