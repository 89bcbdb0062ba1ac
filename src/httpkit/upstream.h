// Upstream: one HTTP/1.1 request to a server of ours (the gateway's to an agent: a completion it
// proxies, or the agent's KV-event stream; umad's model router's to one model's umad), on the
// shared connection layer (net/connection.h): dial, send the request, read the reply with
// httpkit's ResponseReader, and hand its sink the head, the body as it arrives (a chunked body's
// data as each chunk comes) and the end, or one failure. A sink hears at most one of on_end / on_failed, and nothing after
// abort().
//
// Threading: the I/O thread of `io`, all of it. Ownership and lifetime: shared_ptr (the sink holds
// it); the upstream holds itself while a sink callback runs, so a sink may drop it from inside one
// (Redis's "never free a client in its own handler"). Destroying it closes its connection. The
// sink must outlive the upstream or abort() it first.
// Caps: a connect deadline; a reply head of at most 64 KiB and a body of at most max_body_bytes.
//
// Keep-alive: with an UpstreamPool, a reply that ends with the connection kept alive (the request
// did not ask to close, nor did the server) leaves it in the pool, and the next request to the
// same host:port takes it instead of dialling. A request on a taken connection that breaks before
// any byte of its reply (the server closed it as it went idle) is sent once more on a fresh one.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "httpkit/http_wire.h"
#include "net/connection.h"

namespace uma {

class UpstreamSink {
 public:
  virtual ~UpstreamSink() = default;
  virtual void on_sent() {}  // connected, and the request is on its way
  // streamed: an event stream or NDJSON lines (HttpReader::streamed), not one whole reply.
  virtual void on_head(unsigned status, bool streamed) = 0;
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
// "host:port", as a Host header names it.
std::string host_header(const HostPort& hp);

class UpstreamLink;  // a connection and whoever uses it now (upstream.cc)

// Idle kept-alive connections by host:port, for Upstreams to reuse. Caps: max_idle_per_peer
// connections a peer; one idle longer than max_idle is closed rather than reused (before the
// server's own idle timeout can race a request). Threading: the I/O thread of the connections'
// io_context. Lifetime: outlives every Upstream given it; destroying it closes what it holds.
class UpstreamPool {
 public:
  struct Options {
    std::size_t max_idle_per_peer = 32;
    std::chrono::milliseconds max_idle{10000};
  };
  explicit UpstreamPool(boost::asio::io_context& io) : UpstreamPool(io, Options{}) {}
  UpstreamPool(boost::asio::io_context& io, Options options) : io_(io), options_(options) {}
  ~UpstreamPool();
  UpstreamPool(const UpstreamPool&) = delete;
  UpstreamPool& operator=(const UpstreamPool&) = delete;

  std::size_t idle() const;
  std::uint64_t dialled() const { return dialled_; }  // connections opened for pooled requests
  std::uint64_t reused() const { return reused_; }    // requests sent on a kept-alive connection

 private:
  friend class Upstream;
  friend class UpstreamLink;
  std::shared_ptr<UpstreamLink> take(const std::string& peer);
  void put(const std::string& peer, std::shared_ptr<UpstreamLink> link);
  void forget(const UpstreamLink* link);  // it closed while idle

  boost::asio::io_context& io_;
  Options options_;
  std::unordered_map<std::string, std::vector<std::shared_ptr<UpstreamLink>>> idle_;
  std::uint64_t dialled_ = 0;
  std::uint64_t reused_ = 0;
};

class Upstream final : public std::enable_shared_from_this<Upstream>, private ConnectionOwner {
 public:
  struct Options {
    std::chrono::milliseconds connect_timeout{1000};
    std::size_t max_body_bytes = std::size_t{64} << 20;
    std::size_t max_tx_bytes = std::size_t{4} << 20;
  };
  // Sends `request` (the whole HTTP request's bytes) to `to`: on a connection of `pool`'s when
  // it has one, else on a new one.
  static std::shared_ptr<Upstream> start(boost::asio::io_context& io, const HostPort& to, std::string request,
                                         UpstreamSink* sink, const Options& options, UpstreamPool* pool = nullptr);
  Upstream(boost::asio::io_context& io, UpstreamSink* sink, const Options& options);
  ~Upstream() override;
  void abort();  // closes; the sink hears nothing more
  bool head_seen() const { return head_seen_; }
  // The reply's Content-Type, once its head was seen (a relay's stream keeps it).
  std::string_view content_type() const { return head_seen_ ? reader_.header("Content-Type") : std::string_view{}; }

 private:
  void dial();
  void send_on(std::shared_ptr<UpstreamLink> link);
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
  UpstreamPool* pool_ = nullptr;
  HostPort to_;
  std::string request_;  // kept while a taken connection may still need it sent again
  boost::asio::ip::tcp::socket socket_;
  boost::asio::steady_timer timer_;
  std::shared_ptr<UpstreamLink> link_;
  ConnectionPtr conn_;
  ResponseReader reader_;
  bool reused_ = false;    // the connection came from the pool
  bool got_bytes_ = false; // some of the reply arrived
  bool head_seen_ = false;
  bool finished_ = false;  // the sink heard on_end or on_failed
};

}  // namespace uma
