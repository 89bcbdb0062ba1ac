// RequestServer: a small HTTP/1.1 server for control planes (the agent's management API): each
// request, parsed whole by Beast's resumable parser (bounded header and body), goes to one handler
// as an `HttpExchange`, which answers it with one body or with an SSE stream, now or later (a
// model load answers when it is done, with progress meanwhile). Built on net/Connection, as every
// server here is: the write cap drops a reader that does not keep up; a client that goes away
// closes its exchange, and the handler sees `gone()`.
//
// Access: with a key (`api_key`, read by the caller from a file), every path but `open_paths`
// needs `Authorization: Bearer KEY` (compared in constant time); a request without it is a 401
// `invalid_api_key` in OpenAI's error shape, and never reaches the handler.
// Caps: max_connections open connections (more are closed at once), the header and body sizes
// (431/413), unsent reply bytes, and a request must arrive whole within `timeout` of the
// connection becoming idle (else it closes).
//
// Threading: everything runs on the I/O thread of `io`; an exchange is used there only.
// Ownership: the server owns its connections; an exchange holds its connection (shared) until it
// is answered, and outlives it harmlessly (answers to a gone client are dropped). stop() closes
// every connection; the server must outlive the handler's posted work that holds exchanges.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/http/verb.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "net/accept_loop.h"
#include "net/connection.h"

namespace uma {

struct RequestServerConfig {
  std::string host = "127.0.0.1";
  std::uint16_t port = 0;  // 0: any free port (see port())
  std::string api_key;     // empty: no key required
  std::vector<std::string> open_paths = {"/health"};  // served without the key
  std::int32_t max_connections = 64;
  std::size_t max_header_bytes = 16 * 1024;
  std::size_t max_body_bytes = 64 * 1024;
  std::size_t max_tx_bytes = 1 << 20;
  std::chrono::milliseconds timeout{30000};
  const char* log_name = "http";
};

struct HttpRequest {
  boost::beast::http::verb method = boost::beast::http::verb::unknown;
  std::string path;   // the target without its query
  std::string query;  // after '?', undecoded
  std::string body;
  bool keep_alive = false;
};

class HttpExchange {
 public:
  HttpExchange(ConnectionPtr conn, HttpRequest request, std::function<void(bool keep_alive)> done)
      : conn_(std::move(conn)), request_(std::move(request)), done_(std::move(done)) {}
  const HttpRequest& request() const { return request_; }
  bool gone() const { return conn_->closed(); }
  bool answered() const { return answered_; }

  // One whole answer.
  void reply(unsigned status, std::string_view content_type, std::string_view body);
  void reply_json(unsigned status, std::string_view json) { reply(status, "application/json", json); }
  // An error in OpenAI's shape with the status its code maps to (http/openai.h).
  void reply_error(const Status& st);
  // An SSE stream: the head, then `data: JSON` events, then end_events().
  void start_events();
  void event(std::string_view json);
  void event_bytes(std::string_view sse);  // already SSE text (`data: ...\n\n`): a relayed stream
  void end_events();

 private:
  void finish();
  ConnectionPtr conn_;
  HttpRequest request_;
  std::function<void(bool)> done_;
  bool streaming_ = false;
  bool answered_ = false;
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
  bool authorized(std::string_view path, std::string_view authorization) const;
  void sweep();

  boost::asio::io_context& io_;
  RequestServerConfig config_;
  Handler handler_;
  boost::asio::ip::tcp::acceptor acceptor_;
  AcceptLoop<boost::asio::ip::tcp::acceptor> accept_loop_;
  boost::asio::steady_timer sweep_timer_;
  std::unordered_map<std::uint64_t, std::unique_ptr<Client>> clients_;
  std::uint64_t next_id_ = 1;
  bool stopped_ = true;
};

}  // namespace uma
