// HTTP/1.1 on the wire, once for every server and client here (umad's API, the agent's, uma-gw,
// the KV-event stream, the gateway's upstreams, uma-bench, uma-soak, the tests):
// - response heads: a whole reply (Content-Length) or an event stream (chunked SSE);
// - chunked framing (http_chunk, kLastChunk) and SSE events (`data: ...\n\n`);
// - RequestReader / ResponseReader: Beast's resumable parsers behind one "feed bytes, take what
//   is whole" contract (nginx's "need more" on partial input), with bounded header and body;
// - SseSplitter: a body's bytes -> the `data:` payloads of its events, as they complete.
// Pure: no sockets, no threads; each object belongs to one connection.
#pragma once

#include <boost/beast/http/fields.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/verb.hpp>

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"

namespace uma {

// "HTTP/1.1 S Reason", Content-Type, Content-Length, `extra` (whole "Name: value\r\n" lines),
// Connection, the blank line, then `body`.
std::string http_reply(unsigned status, std::string_view content_type, std::string_view body, bool keep_alive,
                       std::string_view extra = {});
// A 200 event stream's head: text/event-stream, no-cache, chunked, `extra`, Connection.
std::string event_stream_head(bool keep_alive, std::string_view extra = {},
                              std::string_view content_type = "text/event-stream");
// One chunk of a chunked body (size line, data, CRLF); the chunk that ends a body.
std::string http_chunk(std::string_view data);
inline constexpr std::string_view kLastChunk = "0\r\n\r\n";
// One server-sent event carrying `data` (a JSON text), as a chunk.
std::string sse_chunk(std::string_view data);

// A client's request, whole, as every client here sends one.
struct ClientRequest {
  std::string_view method = "GET";
  std::string_view target = "/";  // path and query
  std::string_view host;          // the Host header: "host:port"
  std::string_view body;          // a JSON body (Content-Type, Content-Length; a POST always has the length)
  std::string_view bearer;        // Authorization: Bearer, when set
  std::string_view extra;         // whole "Name: value\r\n" lines
  bool keep_alive = true;         // false: Connection: close
};
std::string http_request(const ClientRequest& r);

// A request, whole.
struct HttpRequest {
  boost::beast::http::verb method = boost::beast::http::verb::unknown;
  std::string target;  // as sent: path and query
  std::string path;    // the target without its query
  std::string query;   // after '?', undecoded
  std::string body;
  bool keep_alive = false;
  boost::beast::http::fields headers;
  // A field's value, "" when absent; `present` says which.
  std::string_view header(std::string_view name, bool* present = nullptr) const;
};

struct HttpLimits {
  std::size_t max_header_bytes = 16 * 1024;
  std::size_t max_body_bytes = 1 << 20;
};

// The bytes of a connection -> its requests, one at a time (a pipelined one stays buffered until
// next() is called again).
class RequestReader {
 public:
  enum class Result { kNeedMore, kRequest, kError };
  void feed(std::string_view bytes) { in_.append(bytes); }
  std::size_t buffered() const { return in_.size(); }
  // kRequest with *out; kError with *error (kPromptTooLarge: the body over its limit; kBadRequest:
  // malformed, or the header over its limit, *header_too_large set: a 431); the connection's
  // input is then unusable. `limits` apply from the next request's first byte.
  Result next(const HttpLimits& limits, HttpRequest* out, Status* error, bool* header_too_large = nullptr);

 private:
  std::string in_;
  std::optional<boost::beast::http::request_parser<boost::beast::http::string_body>> parser_;
};

// The bytes of a connection -> a response: its head as soon as it is whole, then its body as it
// comes (a chunked body's data chunk by chunk; a Content-Length body as it arrives), then its end.
// reset() readies it for the next response on a kept-alive connection (bytes already buffered stay).
class ResponseReader {
 public:
  explicit ResponseReader(std::size_t max_body_bytes = std::size_t{64} << 20);
  ResponseReader(const ResponseReader&) = delete;  // the parser holds a reference to on_chunk_
  ResponseReader& operator=(const ResponseReader&) = delete;
  void feed(std::string_view bytes) { in_.append(bytes); }
  // Parses what is buffered; body bytes parsed now are appended to *body. False with *error on a
  // malformed response or a body over its limit.
  bool pump(std::string* body, std::string* error);
  bool head_done() const { return parser_->is_header_done(); }
  bool done() const { return parser_->is_done(); }
  unsigned status() const { return parser_->get().result_int(); }
  bool keep_alive() const { return parser_->get().keep_alive(); }
  std::string_view header(std::string_view name) const;
  bool event_stream() const { return header("Content-Type").substr(0, 17) == "text/event-stream"; }
  // An event stream or Ollama's NDJSON lines: a reply whose parts mean something as they come.
  bool streamed() const { return event_stream() || header("Content-Type").substr(0, 20) == "application/x-ndjson"; }
  // The body has neither a length nor chunks: it ends when the connection does.
  bool reads_to_eof() const { return parser_->is_header_done() && parser_->need_eof(); }
  std::size_t buffered() const { return in_.size(); }  // fed, not yet parsed (the next response's)
  // The end of stream came: a response without a length ends there (true: it is now done).
  bool eof();
  void reset();

 private:
  std::size_t max_body_;
  std::string in_;
  std::string chunk_;  // body bytes Beast handed over since the last pump
  std::function<std::size_t(std::uint64_t, boost::beast::string_view, boost::beast::error_code&)> on_chunk_;
  std::optional<boost::beast::http::response_parser<boost::beast::http::string_body>> parser_;
};

// SSE: body bytes in, the payload of each `data: ` line out as its line completes (our streams
// carry one data line an event); comments (`: ping`), blank lines and other fields skipped.
class SseSplitter {
 public:
  void feed(std::string_view bytes) { buf_.append(bytes); }
  // The next data line's payload; false when no whole one is buffered.
  bool next(std::string* data);

 private:
  std::string buf_;
};

}  // namespace uma
