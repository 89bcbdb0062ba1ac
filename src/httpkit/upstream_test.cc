// The HTTP clients on a real loopback socket: Upstream with its pool on one I/O loop, and the
// blocking HttpClient against a server on a loop of its own. For both, kept-alive connections
// are reused, and a request on one the server closed goes again on a fresh connection.
#include "httpkit/upstream.h"

#include <gtest/gtest.h>

#include <boost/asio/read_until.hpp>
#include <boost/asio/streambuf.hpp>
#include <boost/asio/write.hpp>

#include <functional>
#include <thread>

#include "httpkit/http_client.h"
#include "httpkit/request_server.h"

namespace uma {
namespace {

namespace asio = boost::asio;

// Runs `count` requests one after another, each started when the last ended, and collects them.
class Chain final : public UpstreamSink {
 public:
  Chain(asio::io_context& io, std::uint16_t port, UpstreamPool& pool, int count, std::function<void()> done)
      : io_(io), to_{"127.0.0.1", port}, pool_(pool), left_(count), done_(std::move(done)) {}
  void next() {
    if (left_-- == 0) return done_();
    body_.clear();
    up_ = Upstream::start(io_, to_, "GET /n HTTP/1.1\r\nHost: x\r\n\r\n", this, Upstream::Options{}, &pool_);
  }
  std::vector<std::string> bodies;
  std::vector<std::string> failures;

 private:
  void on_head(unsigned, bool) override {}
  void on_body(std::string_view bytes) override { body_.append(bytes); }
  void on_end() override {
    bodies.push_back(body_);
    next();
  }
  void on_failed(const std::string& why, bool) override {
    failures.push_back(why);
    next();
  }
  asio::io_context& io_;
  HostPort to_;
  UpstreamPool& pool_;
  int left_;
  std::function<void()> done_;
  std::shared_ptr<Upstream> up_;
  std::string body_;
};

TEST(UpstreamPool, KeptAliveConnectionsAreReused) {
  asio::io_context io;
  int served = 0;
  RequestServer server(io, RequestServerConfig{}, [&](const HttpExchangePtr& ex) {
    ex->reply(200, "text/plain", std::to_string(++served));
  });
  ASSERT_TRUE(server.listen().ok());
  server.start();
  UpstreamPool pool(io);
  Chain chain(io, server.port(), pool, 5, [&] {
    server.stop();
    io.stop();
  });
  chain.next();
  io.run();
  EXPECT_EQ(chain.bodies, (std::vector<std::string>{"1", "2", "3", "4", "5"}));
  EXPECT_TRUE(chain.failures.empty());
  EXPECT_EQ(pool.dialled(), 1u);
  EXPECT_EQ(pool.reused(), 4u);
}

// A server that answers each connection's first request kept alive, then closes it at once.
class OneShotServer {
 public:
  explicit OneShotServer(asio::io_context& io) : acceptor_(io, {asio::ip::make_address("127.0.0.1"), 0}) { accept(); }
  std::uint16_t port() const { return acceptor_.local_endpoint().port(); }
  void stop() { acceptor_.close(); }
  int served = 0;

 private:
  void accept() {
    acceptor_.async_accept([this](const boost::system::error_code& ec, asio::ip::tcp::socket s) {
      if (ec) return;
      auto sock = std::make_shared<asio::ip::tcp::socket>(std::move(s));
      auto buf = std::make_shared<asio::streambuf>();
      asio::async_read_until(*sock, *buf, "\r\n\r\n", [this, sock, buf](const boost::system::error_code& e, std::size_t) {
        if (e) return;
        auto reply = std::make_shared<std::string>(http_reply(200, "text/plain", std::to_string(++served), true));
        asio::async_write(*sock, asio::buffer(*reply), [sock, reply](const boost::system::error_code&, std::size_t) {
          boost::system::error_code ignored;
          sock->close(ignored);
        });
      });
      accept();
    });
  }
  asio::ip::tcp::acceptor acceptor_;
};

TEST(UpstreamPool, ARequestOnAConnectionTheServerClosedGoesAgainOnAFreshOne) {
  asio::io_context io;
  OneShotServer server(io);
  UpstreamPool pool(io);
  Chain chain(io, server.port(), pool, 3, [&] {
    server.stop();
    io.stop();
  });
  chain.next();
  io.run();
  // Each reply's connection went to the pool and was taken by the next request before its close
  // was seen; that request was sent again on a new connection, and nothing failed.
  EXPECT_EQ(chain.bodies, (std::vector<std::string>{"1", "2", "3"}));
  EXPECT_TRUE(chain.failures.empty());
  EXPECT_EQ(pool.reused(), 2u);
  EXPECT_EQ(pool.dialled(), 3u);
  EXPECT_EQ(server.served, 3);
}

// A server's loop on its own thread, for the blocking client on the test's.
class LoopThread {
 public:
  explicit LoopThread(asio::io_context& io) : io_(io), guard_(asio::make_work_guard(io)), thread_([this] { io_.run(); }) {}
  ~LoopThread() {
    guard_.reset();
    io_.stop();
    thread_.join();
  }

 private:
  asio::io_context& io_;
  asio::executor_work_guard<asio::io_context::executor_type> guard_;
  std::thread thread_;
};

// Three requests, each read to its end: their bodies, and how many connections they took.
std::vector<std::string> three_gets(HttpClient& client, std::string* failure) {
  std::vector<std::string> bodies;
  for (int i = 0; i < 3; ++i) {
    const auto deadline = BlockingClock::now() + std::chrono::seconds(10);
    std::string body;
    if (client.request("GET", "/n", "", deadline, failure) != Read::kData ||
        client.response().body(&body, deadline, failure) != Read::kData) {
      return bodies;
    }
    client.finish();
    bodies.push_back(body);
  }
  return bodies;
}

TEST(HttpClient, AKeptAliveConnectionServesTheNextRequest) {
  asio::io_context io;
  int served = 0;  // on the loop's thread
  RequestServer server(io, RequestServerConfig{}, [&](const HttpExchangePtr& ex) {
    ex->reply(200, "text/plain", std::to_string(++served));
  });
  ASSERT_TRUE(server.listen().ok());
  server.start();
  {
    LoopThread loop(io);
    HttpClient client("127.0.0.1", server.port());
    std::string failure;
    EXPECT_EQ(three_gets(client, &failure), (std::vector<std::string>{"1", "2", "3"})) << failure;
    EXPECT_EQ(client.connections_opened(), 1);
    HttpClient once("127.0.0.1", server.port(), false);  // Connection: close, and a dial each
    EXPECT_EQ(three_gets(once, &failure), (std::vector<std::string>{"4", "5", "6"})) << failure;
    EXPECT_EQ(once.connections_opened(), 3);
  }
  server.stop();
}

TEST(HttpClient, ARequestOnAConnectionTheServerClosedGoesAgainOnAFreshOne) {
  asio::io_context io;
  OneShotServer server(io);
  {
    LoopThread loop(io);
    HttpClient client("127.0.0.1", server.port());
    std::string failure;
    EXPECT_EQ(three_gets(client, &failure), (std::vector<std::string>{"1", "2", "3"})) << failure;
    EXPECT_EQ(client.connections_opened(), 3);
  }
}

}  // namespace
}  // namespace uma
