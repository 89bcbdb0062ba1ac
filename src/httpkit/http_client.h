// The blocking HTTP/1.1 client of the tools and tests (uma-bench, uma-soak, the e2e tests), on
// net/blocking_socket.h and the same ResponseReader and SseSplitter that the gateway's event-loop
// client (httpkit/upstream.h) reads with.
// - ResponseStream: one response at a time from a socket: its head, its whole body, or its
//   server-sent events one `data:` payload at a time; reset() for the next on a kept-alive one.
// - HttpClient: requests to one host:port over one kept-alive connection, dialled again when the
//   server closed it (a request on a reused connection that breaks before any reply byte is sent
//   again once, on a fresh one, as UpstreamPool does).
//
// Thread-safety: none; one object per thread. Ownership: a ResponseStream borrows its socket,
// which must outlive it; an HttpClient owns its connection.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "httpkit/http_wire.h"
#include "net/blocking_socket.h"

namespace uma {

class ResponseStream {
 public:
  using Clock = BlockingClock;
  explicit ResponseStream(BlockingSocket& s, Pacing pacing = {}) : s_(s), pacer_(pacing) {}
  // Reads until the head is in (kData), or kEof / kTimeout / kError (a parse error).
  Read header(Clock::time_point deadline, std::string* error);
  unsigned status() const { return rx_.status(); }
  std::string header_value(std::string_view field) const { return std::string(rx_.header(field)); }
  bool keep_alive() const { return rx_.keep_alive(); }
  // Reads the whole body (kData), or kEof / kTimeout / kError.
  Read body(std::string* out, Clock::time_point deadline, std::string* error);
  // Server-sent events: the next `data:` payload (kData); kEof at the end of the message (the
  // stream ended properly) or when the connection closed before it (see ended()).
  Read next_data(std::string* data, Clock::time_point deadline, std::string* error);
  bool ended() const { return rx_.done(); }
  bool any_bytes() const { return got_bytes_; }  // since the last reset()
  void reset();  // the next response on this connection

 private:
  Read pump(Clock::time_point deadline, std::string* error);  // one read into the reader
  bool take(std::string* error, bool* progress);                // parses what is buffered

  BlockingSocket& s_;
  Pacer pacer_;
  ResponseReader rx_;
  std::string body_;  // body bytes not yet taken by body()
  SseSplitter sse_;
  bool eof_ = false;
  bool got_bytes_ = false;
};

class HttpClient {
 public:
  using Clock = BlockingClock;
  HttpClient(std::string host, int port, bool keep_alive = true);
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // Sends `method target` with a JSON body (none when empty) and reads the answer's head:
  // kData, and then response() reads the rest; else what went wrong, in *error.
  Read request(std::string_view method, std::string_view target, std::string_view json_body,
               Clock::time_point deadline, std::string* error);
  ResponseStream& response() { return *response_; }
  // The answer was read to its end: its connection serves the next request if both sides keep it
  // alive; otherwise (or when it was not read to its end) it closes.
  void finish();
  int connections_opened() const { return dials_; }

 private:
  bool dial(std::string* error);

  std::string host_;
  int port_;
  bool keep_alive_;
  BlockingSocket socket_;
  std::optional<ResponseStream> response_;
  int dials_ = 0;
};

}  // namespace uma
