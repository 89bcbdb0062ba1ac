// Raw HTTP/1.1 over TCP for the end-to-end tests of umad's OpenAI-compatible front end
// (umad_http_test, umad_http_malformed_test): what an SDK never sends can be sent byte for byte.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "e2e/daemon_harness.h"
#include "net/blocking_socket.h"

namespace uma::test {

// The port umad bound for --http (from its log), or -1.
int http_port(const Daemon& d);

// Daemon arguments: the JSON protocol on the socket, HTTP on a free loopback port, chatml.
std::vector<std::string> http_args(std::vector<std::string> extra);

// The length of the first whole response at the front of `b` (its head plus a Content-Length or
// chunked body), or std::string::npos while it is incomplete. A head with neither is whole.
std::size_t response_length(const std::string& b);

// A TCP connection to the daemon's HTTP port, raw bytes both ways (on net/blocking_socket.h).
class Tcp {
 public:
  explicit Tcp(int port, int rcvbuf = 0);
  ~Tcp();
  Tcp(const Tcp&) = delete;
  Tcp& operator=(const Tcp&) = delete;
  bool connected() const { return socket_.valid(); }
  // Sends all of `s` (false if the peer closed or reset first, or the hang guard passed).
  bool send(const std::string& s);
  // Reads until `done(buffer)`, the peer closes (or resets) or `timeout` passes.
  std::string read_until(const std::function<bool(const std::string&)>& done,
                         std::chrono::milliseconds timeout = kHangGuard);
  // One whole response, removed from the buffer; what arrived of it if the peer closed first or
  // `timeout` passed (then it stays in the buffer too: see buffered()).
  std::string response(std::chrono::milliseconds timeout = kHangGuard);
  // True once the peer has closed (or reset) the connection, waiting up to `timeout`; what arrives
  // meanwhile is kept in buffered().
  bool closed_by_peer(std::chrono::milliseconds timeout);
  bool closed() const { return closed_; }
  const std::string& buffered() const { return buf_; }
  void shutdown_write();  // half-close: no more bytes from us
  void close();

 private:
  BlockingSocket socket_;
  std::string buf_;
  bool closed_ = false;
};

// The body after the head ("" if there is no head); status code from the status line (-1 if none).
std::string body_of(const std::string& response);
int status_of(const std::string& response);
// The head (status line and fields) without the blank line.
std::string head_of(const std::string& response);
// A chunked body decoded (the chunks' data concatenated).
std::string dechunk(const std::string& body);

// A POST with a JSON body and its Content-Length.
std::string post(const std::string& path, const std::string& body, bool keep_alive = true);

}  // namespace uma::test
