// RequestServer: the HTTP/1.1 server every service here but umad's completion front end is (the
// agent's management API, uma-gw, the agent's KV-event stream, umad's model router). Each
// request, read whole by httpkit's RequestReader (bounded header and body) and let through by the
// access policy (httpkit/access.h: the key, CORS preflights), goes to one handler as an
// `HttpExchange`, which answers it with one body, an SSE stream, or raw bytes it relays, now or
// later. Built on net/Connection: the write cap drops a reader that does not keep up; a client
// that goes away closes its exchange, which tells its `on_gone` callback.
// (umad's completion front end is an adapter on net/StreamServer instead, for its session slots
// and cancel-on-close; it reads and answers requests with the same httpkit pieces.)
//
// Caps: max_connections, counting a closed connection whose exchange a handler still holds (its
// request still occupies the server: e.g. a prompt queued for a tokenizer thread); more are closed
// at once. The header and body sizes (431/413), unsent reply bytes, and a request must arrive
// whole within `timeout` of the connection becoming idle (else it closes).
//
// Threading: everything runs on the I/O thread of `io`; exchanges are used and destroyed there.
// Ownership: the server owns its connections; an exchange holds its connection (shared) until it
// is answered, and outlives it harmlessly (answers to a gone client are dropped). stop() closes
// every connection; the server must outlive the handler's work that holds exchanges.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>

#include "common/status.h"
#include "httpkit/access.h"
#include "httpkit/http_wire.h"
#include "net/accept_loop.h"
#include "net/connection.h"

namespace uma {

struct RequestServerConfig {
  std::string host = "127.0.0.1";
  std::uint16_t port = 0;  // 0: any free port (see port())
  AccessPolicy access;
  std::int32_t max_connections = 64;
  HttpLimits limits{16 * 1024, 64 * 1024};
  std::size_t max_tx_bytes = 1 << 20;
  std::chrono::milliseconds timeout{30000};
  const char* log_name = "http";
};

class HttpExchange {
 public:
  HttpExchange(ConnectionPtr conn, HttpRequest request, std::string cors, std::function<void(bool keep_alive)> done,
               std::shared_ptr<std::size_t> held_after_close)
      : conn_(std::move(conn)), request_(std::move(request)), cors_(std::move(cors)), done_(std::move(done)),
        held_after_close_(std::move(held_after_close)) {}
  ~HttpExchange();
  HttpExchange(const HttpExchange&) = delete;
  HttpExchange& operator=(const HttpExchange&) = delete;

  const HttpRequest& request() const { return request_; }
  // The body, moved out for a handler that hands it to another thread (request().body is then
  // empty). On the I/O thread, like everything here.
  std::string take_body() { return std::move(request_.body); }
  bool gone() const { return conn_->closed(); }
  bool answered() const { return answered_; }
  bool keep_alive() const { return request_.keep_alive; }
  const std::string& cors() const { return cors_; }  // the CORS headers every answer carries
  // Called once, on the I/O thread, when the client goes before the answer is whole.
  void on_gone(std::function<void()> callback) { on_gone_ = std::move(callback); }

  // One whole answer.
  void reply(unsigned status, std::string_view content_type, std::string_view body);
  void reply_json(unsigned status, std::string_view json) { reply(status, "application/json", json); }
  void reply_error(const Status& st);  // OpenAI's error shape, the status its code maps to
  // An SSE stream: the head, then `data: JSON` events (or SSE text as it is: a relayed stream, a
  // `: ping` comment), then end_events(). A relayed NDJSON stream gives its own content type.
  void start_events(std::string_view content_type = "text/event-stream");
  void event(std::string_view json);
  void event_bytes(std::string_view sse);
  void end_events();
  // A relay that writes the HTTP answer's bytes itself (heads from httpkit/http_wire.h, the
  // exchange's cors() and keep_alive() in them), then says it is whole.
  void send_raw(std::string_view bytes);
  void finish_raw() { finish(); }

 private:
  friend class RequestServer;
  void client_gone();  // the server's: its connection closed
  void finish();
  ConnectionPtr conn_;
  HttpRequest request_;
  std::string cors_;
  std::function<void(bool)> done_;
  std::function<void()> on_gone_;
  std::shared_ptr<std::size_t> held_after_close_;
  bool streaming_ = false;
  bool answered_ = false;
  bool orphaned_ = false;  // its connection closed while a handler held it
};
using HttpExchangePtr = std::shared_ptr<HttpExchange>;

class RequestServer final : private ConnectionOwner {
 public:
  using Handler = std::function<void(const HttpExchangePtr&)>;
  RequestServer(boost::asio::io_context& io, RequestServerConfig config, Handler handler);
  ~RequestServer() override;

  Status listen();
  std::uint16_t port() const;
  void start();
  void stop();  // closes the listener and every connection
  // A graceful stop's first half: the listener closes (what waits in its backlog is still served),
  // idle connections close, and a busy one closes once its answer is out (answers from now on say
  // `Connection: close`). connections() reaches 0 as the last answers end.
  void drain();
  bool draining() const { return draining_; }
  // Requests answered by the server itself: malformed, over a limit, or without the key.
  std::uint64_t rejected() const { return rejected_; }
  std::size_t connections() const { return clients_.size(); }

 private:
  struct Client;
  void on_input(const ConnectionPtr& c, std::string_view bytes) override;
  void on_peer_eof(const ConnectionPtr& c) override { c->close("peer eof"); }
  bool input_full(const Connection& c) const override;
  void on_close(const ConnectionPtr& c) override;
  void on_failure(const ConnectionPtr& c, const char* what) override;
  void adopt(boost::asio::ip::tcp::socket s);
  void serve(Client& cl);
  void exchange_done(std::uint64_t id, bool keep_alive);
  void sweep();

  boost::asio::io_context& io_;
  RequestServerConfig config_;
  Handler handler_;
  boost::asio::ip::tcp::acceptor acceptor_;
  AcceptLoop<boost::asio::ip::tcp::acceptor> accept_loop_;
  boost::asio::steady_timer sweep_timer_;
  std::unordered_map<std::uint64_t, std::unique_ptr<Client>> clients_;
  std::shared_ptr<std::size_t> held_after_close_ = std::make_shared<std::size_t>(0);
  std::uint64_t next_id_ = 1;
  std::uint64_t rejected_ = 0;
  bool stopped_ = true;
  bool draining_ = false;
};

}  // namespace uma
