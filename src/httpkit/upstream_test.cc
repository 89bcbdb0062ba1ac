// The HTTP clients on a real loopback socket: Upstream with its pool on one I/O loop, and the
// blocking HttpClient against a server on a loop of its own. For both, kept-alive connections
// are reused, and a request on one the server closed goes again on a fresh connection.
#include "httpkit/upstream.h"

#include <gtest/gtest.h>

#include <boost/asio/read_until.hpp>
#include <boost/asio/streambuf.hpp>
#include <boost/asio/write.hpp>

#include <functional>
#include <future>
#include <thread>

#include "httpkit/http_client.h"
#include "httpkit/request_server.h"
#include "net/blocking_socket.h"

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

// What comes on `s` until the server closes it (the hang guard at most).
std::string read_to_eof(BlockingSocket& s) {
  std::string out, error;
  char buf[4096];
  const auto deadline = BlockingClock::now() + std::chrono::seconds(120);
  for (;;) {
    std::size_t n = 0;
    const Read r = s.read_some(buf, sizeof buf, deadline, &n, &error);
    if (r != Read::kData) return r == Read::kEof ? out : out + "<" + describe(r) + ">";
    out.append(buf, n);
  }
}

// A graceful stop: an idle kept-alive connection closes at once, a busy one once its answer is
// out (saying Connection: close), and the listener takes no new connection.
TEST(RequestServer, DrainClosesIdleConnectionsAtOnceAndBusyOnesAfterTheirAnswer) {
  asio::io_context io;
  std::vector<HttpExchangePtr> held;  // on the loop's thread
  RequestServer server(io, RequestServerConfig{}, [&](const HttpExchangePtr& ex) {
    if (ex->request().path == "/hold") return held.push_back(ex);
    ex->reply(200, "text/plain", "ok");
  });
  ASSERT_TRUE(server.listen().ok());
  server.start();
  const int port = server.port();
  LoopThread loop(io);
  const auto on_loop = [&io](const std::function<void()>& f) {
    std::promise<void> done;
    asio::post(io, [&] {
      f();
      done.set_value();
    });
    done.get_future().wait();
  };
  const auto deadline = [] { return BlockingClock::now() + std::chrono::seconds(120); };
  std::string error;
  BlockingSocket idle = BlockingSocket::tcp("127.0.0.1", port, 0, &error);
  ASSERT_TRUE(idle.send_all("GET /a HTTP/1.1\r\nHost: x\r\n\r\n", deadline(), &error)) << error;
  char buf[4096];
  std::size_t n = 0;
  ASSERT_EQ(idle.read_some(buf, sizeof buf, deadline(), &n, &error), Read::kData) << error;
  EXPECT_NE(std::string(buf, n).find("keep-alive"), std::string::npos) << std::string(buf, n);
  BlockingSocket busy = BlockingSocket::tcp("127.0.0.1", port, 0, &error);
  ASSERT_TRUE(busy.send_all("GET /hold HTTP/1.1\r\nHost: x\r\n\r\n", deadline(), &error)) << error;
  bool holding = false;
  const auto until = deadline();
  while (!holding && BlockingClock::now() < until) on_loop([&] { holding = !held.empty(); });
  ASSERT_TRUE(holding) << "timed out waiting for the held request to reach the handler";

  on_loop([&] { server.drain(); });
  EXPECT_EQ(read_to_eof(idle), "") << "the idle connection closed at once";
  BlockingSocket late = BlockingSocket::tcp("127.0.0.1", port, 0, &error);
  EXPECT_FALSE(late.valid()) << "a new connection is refused";
  std::size_t open = 0;
  on_loop([&] { open = server.connections(); });
  EXPECT_EQ(open, 1u) << "the busy one stays until its answer";
  on_loop([&] { held.front()->reply(200, "text/plain", "done"); });
  const std::string answer = read_to_eof(busy);
  EXPECT_NE(answer.find("200"), std::string::npos) << answer;
  EXPECT_NE(answer.find("done"), std::string::npos) << answer;
  EXPECT_NE(answer.find("Connection: close"), std::string::npos) << answer;
  on_loop([&] { open = server.connections(); });
  EXPECT_EQ(open, 0u);
  on_loop([&] {
    held.clear();
    server.stop();
  });
}

}  // namespace
}  // namespace uma
