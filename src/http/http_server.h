// HttpServer: the OpenAI-compatible HTTP/1.1 front end (POST /v1/completions,
// POST /v1/chat/completions, GET /v1/models, GET /health, GET /metrics), one more protocol on the
// same I/O loop, scheduler and events as the Unix socket. Requests are parsed with Boost.Beast
// (bounded header and body), answered with SSE (`data:` chunks, `data: [DONE]`) or one JSON body.
//
// Threading: like UdsServer, every method runs on the I/O thread except deliver(), which the
// compute thread calls and which posts onto the loop. Ownership: the server owns its connections;
// each async operation holds a shared_ptr to its connection.
// Per connection, one state (http_server.cc, `HttpConnState`, set through an asserting setter):
// reading a request (within --http-timeout-sec, or the connection closes) -> running a completion
// (a read stays armed, so a client that goes away cancels its request at the next token) -> the
// reply written, then read the next (keep-alive) or close -> closed. Closing cancels the request
// in flight, in one place (close()).
// Caps: --max-connections open connections (more are closed as they arrive, counted), a request's
// header and body size, unsent reply bytes (a slow reader is dropped), and the daemon's session
// slots (net/session_slots.h) for completions in flight. Accepting pauses and backs
// off when descriptors run out (net/accept_loop.h) and never ends while the server runs.
// Request ids start at kFirstId, so an EventRouter can tell them from the Unix socket's.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "http/http_router.h"
#include "http/openai.h"
#include "net/accept_loop.h"
#include "net/connection_table.h"
#include "net/session_slots.h"
#include "metrics/server_metrics.h"
#include "sched/io_boundary.h"
#include "sched/request.h"

namespace uma {

struct HttpConfig {
  std::string host = "127.0.0.1";
  std::uint16_t port = 8080;                  // 0: any free port (see port())
  std::size_t max_body_bytes = 1 << 20;
  std::int32_t timeout_sec = 30;              // to receive a whole request; idle keep-alive too
  std::size_t max_header_bytes = 16 * 1024;
  std::int32_t max_connections = 256;         // open HTTP connections; more are closed at once
  std::size_t max_tx_bytes = 1 << 20;         // unsent reply bytes (queued and in flight) before a slow reader is dropped
  openai::Limits limits;
  SamplingParams default_sampling;
};

class HttpServer final : public EventSink {
 public:
  static constexpr RequestId kFirstId = RequestId{1} << 62;
  using ChatTemplate = http_route::ChatTemplate;

  // A completion takes one of `slots` (shared with the Unix socket) until its last event.
  HttpServer(boost::asio::io_context& io, HttpConfig config, ServerMetrics& metrics, SessionSlots& slots,
             WorkSubmit submit);
  ~HttpServer() override;

  Status listen();                   // binds and listens (before the model loads: /health says 503)
  std::uint16_t port() const;        // the bound port
  void start();                      // accepts
  // The model is loaded: completions are served from now on.
  void set_ready(std::string model_id, ChatTemplate chat_template);
  void begin_shutdown();             // stop accepting; new completions get 503
  void finish_shutdown();            // close every connection
  void deliver(std::vector<Event> events) override;

 private:
  struct Conn;
  using ConnPtr = std::shared_ptr<Conn>;

  void on_accept(boost::asio::ip::tcp::socket socket);
  void read_request(const ConnPtr& c);
  void on_read(const ConnPtr& c, boost::system::error_code ec);
  void on_request(const ConnPtr& c);
  void start_completion(const ConnPtr& c, http_route::Completion completion);
  // The exception boundary: runs `f` for connection `c`; whatever escapes it becomes a 500 (or
  // the end of a stream already begun), the connection closes, `internal` is counted, and the
  // server serves on.
  template <typename F>
  void guarded(const ConnPtr& c, F&& f);
  void fail_internal(const ConnPtr& c, const char* what);
  void watch_disconnect(const ConnPtr& c);
  void on_events(std::vector<Event>& events);
  void on_event(const ConnPtr& c, Event& ev);
  void respond(const ConnPtr& c, unsigned status, std::string_view content_type, std::string_view body);
  void respond_error(const ConnPtr& c, ErrorCode code, std::string_view message);
  void send(const ConnPtr& c, std::string bytes);
  void send_sse(const ConnPtr& c, std::string_view data);
  void end_completion(const ConnPtr& c);
  void close(const ConnPtr& c);

  boost::asio::io_context& io_;
  HttpConfig config_;
  ServerMetrics& metrics_;
  SessionSlots& slots_;
  WorkSubmit submit_;
  ConnectionTable<Conn> table_;  // open connections, request ids and the request -> connection map
  boost::asio::ip::tcp::acceptor acceptor_;
  AcceptLoop<boost::asio::ip::tcp::acceptor> accept_loop_;
  bool ready_ = false;
  bool shutting_down_ = false;
  std::string model_id_ = "umad";
  ChatTemplate chat_template_;
};

}  // namespace uma
