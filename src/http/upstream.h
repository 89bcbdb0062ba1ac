// Upstream: one HTTP/1.1 request to a server of ours (the gateway's to an agent: a completion it
// proxies, or the agent's KV-event stream; umad's model router's to one model's umad), on the
// shared connection layer (net/connection.h): dial, send the
// request, read the reply with Beast's resumable response parser, and hand its sink the head, the
// body as it arrives (a chunked body's data as each chunk comes; a Content-Length body whole) and
// the end, or one failure. A sink hears at most one of on_end / on_failed, and nothing after
// abort().
//
// Threading: the I/O thread of `io`, all of it. Ownership and lifetime: shared_ptr (the sink holds
// it); the upstream holds itself while a sink callback runs, so a sink may drop it from inside one
// (Redis's "never free a client in its own handler"). Destroying it closes its connection. The
// sink must outlive the upstream or abort() it first.
// Caps: a connect deadline; a reply head of at most 16 KiB and a body of at most max_body_bytes.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "net/connection.h"

namespace uma {

class UpstreamSink {
 public:
  virtual ~UpstreamSink() = default;
  virtual void on_sent() {}  // connected, and the request is on its way
  virtual void on_head(unsigned status, bool event_stream) = 0;
  virtual void on_body(std::string_view bytes) = 0;
  virtual void on_end() = 0;  // the whole reply has arrived
  // The agent could not be reached, or the reply broke off: `before_head` says whether anything
  // of it had arrived.
  virtual void on_failed(const std::string& why, bool before_head) = 0;
};

struct HostPort {
  std::string host;
  std::uint16_t port = 0;
};
// "http://host:port[/...]" or "host:port" -> host and port; false when it is neither.
bool parse_host_port(std::string_view url, HostPort* out);

class Upstream final : public std::enable_shared_from_this<Upstream>, private ConnectionOwner {
 public:
  struct Options {
    std::chrono::milliseconds connect_timeout{1000};
    std::size_t max_body_bytes = std::size_t{64} << 20;
    std::size_t max_tx_bytes = std::size_t{4} << 20;
  };
  // Dials `to` and sends `request` (the whole HTTP request's bytes).
  static std::shared_ptr<Upstream> start(boost::asio::io_context& io, const HostPort& to, std::string request,
                                         UpstreamSink* sink, const Options& options);
  Upstream(boost::asio::io_context& io, UpstreamSink* sink, const Options& options);
  ~Upstream() override;
  void abort();  // closes; the sink hears nothing more
  bool head_seen() const { return head_seen_; }

 private:
  void dial(const HostPort& to, std::string request);
  void fail(const std::string& why);
  void on_input(const ConnectionPtr& c, std::string_view bytes) override;
  void on_peer_eof(const ConnectionPtr& c) override;
  bool input_full(const Connection&) const override { return false; }
  void on_close(const ConnectionPtr& c) override;
  void on_failure(const ConnectionPtr& c, const char* what) override;
  void parse();
  void note_head();  // tells the sink the head, once, as soon as it is whole

  boost::asio::io_context& io_;
  UpstreamSink* sink_;
  Options options_;
  boost::asio::ip::tcp::socket socket_;
  boost::asio::steady_timer timer_;
  ConnectionPtr conn_;
  std::string in_;
  std::function<std::size_t(std::uint64_t, std::string_view, boost::beast::error_code&)> on_chunk_;
  std::optional<boost::beast::http::response_parser<boost::beast::http::string_body>> parser_;
  bool head_seen_ = false;
  bool finished_ = false;  // the sink heard on_end or on_failed
};

}  // namespace uma
