// The agent's edge: keep_alive durations as Ollama takes them, and the request server's key check
// and caps on a real loopback socket (the I/O loop on its own thread), before any handler runs.
#include "agent/agent_api.h"

#include <gtest/gtest.h>

#include <boost/asio/post.hpp>

#include <atomic>
#include <thread>

#include "httpkit/request_server.h"
#include "net/loopback_test_client.h"

namespace uma::agent {
namespace {

std::int64_t duration(std::string_view text) {
  std::int64_t ms = 12345;
  const Status s = parse_duration_ms(text, &ms);
  return s.ok() ? ms : -999;
}

TEST(AgentApi, KeepAliveDurationsAreOllamas) {
  EXPECT_EQ(duration("5m"), 300000);
  EXPECT_EQ(duration("45s"), 45000);
  EXPECT_EQ(duration("300ms"), 300);
  EXPECT_EQ(duration("1h30m"), 5400000);
  EXPECT_EQ(duration("1.5s"), 1500);
  EXPECT_EQ(duration("120"), 120000) << "a bare number is seconds";
  EXPECT_EQ(duration("0"), 0);
  EXPECT_EQ(duration("-1"), -1) << "negative: never";
  EXPECT_EQ(duration("-5m"), -1);
  for (const char* bad : {"", "-", "5x", "m", "5m3", "1 h", "12345678901234s", "3d", "5m-1", ".", "1.2.3s", ".s"}) {
    EXPECT_EQ(duration(bad), -999) << bad;
  }
}

class Loopback {
 public:
  explicit Loopback(RequestServerConfig cfg) {
    cfg.port = 0;
    server_ = std::make_unique<RequestServer>(io_, cfg, [this](const HttpExchangePtr& ex) {
      handled++;
      if (ex->request().path == "/events") {
        ex->start_events();
        ex->event("{\"n\":1}");
        return ex->end_events();
      }
      ex->reply_json(200, "{\"path\":\"" + ex->request().path + "\",\"body\":" + std::to_string(ex->request().body.size()) + "}");
    });
    EXPECT_TRUE(server_->listen().ok());
    server_->start();
    port_ = server_->port();
    loop_ = std::thread([this] { io_.run(); });
  }
  ~Loopback() {
    boost::asio::post(io_, [this] {
      server_->stop();
      io_.stop();
    });
    loop_.join();
  }
  std::string exchange(const std::string& request) const { return loopback_exchange(port_, request); }
  std::atomic<int> handled{0};

 private:
  boost::asio::io_context io_;
  std::unique_ptr<RequestServer> server_;
  std::thread loop_;
  std::uint16_t port_ = 0;
};

std::string post(const std::string& path, const std::string& body, const std::string& auth = "") {
  return "POST " + path + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + (auth.empty() ? "" : "Authorization: " + auth + "\r\n") +
         "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

TEST(RequestServer, WithAKeyEveryPathButHealthNeedsItAndNoHandlerSeesARequestWithout) {
  RequestServerConfig cfg;
  cfg.access.api_key = "k3y-of-the-cluster";
  Loopback lb(cfg);
  for (const std::string auth : {"", "Bearer wrong", "Bearer k3y-of-the-cluste", "Bearer k3y-of-the-cluster2", "k3y-of-the-cluster",
                                 "Basic k3y-of-the-cluster"}) {
    const std::string out = lb.exchange(post("/load", "{\"model\":\"m\"}", auth));
    EXPECT_EQ(out.rfind("HTTP/1.1 401", 0), 0u) << auth << "\n" << out;
    EXPECT_NE(out.find("\"code\":\"invalid_api_key\""), std::string::npos) << out;
  }
  EXPECT_EQ(lb.handled.load(), 0);
  EXPECT_EQ(lb.exchange(post("/load", "{}", "Bearer k3y-of-the-cluster")).rfind("HTTP/1.1 200", 0), 0u);
  EXPECT_EQ(lb.exchange("GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").rfind("HTTP/1.1 200", 0), 0u);
  EXPECT_EQ(lb.handled.load(), 2);
}

TEST(RequestServer, BodiesOverTheCapAreRefusedAndStreamsAreChunkedSse) {
  RequestServerConfig cfg;
  cfg.limits.max_body_bytes = 100;
  Loopback lb(cfg);
  EXPECT_EQ(lb.exchange(post("/x", std::string(101, 'a'))).rfind("HTTP/1.1 413", 0), 0u);
  EXPECT_EQ(lb.exchange("GARBAGE\r\n\r\n").rfind("HTTP/1.1 400", 0), 0u);
  EXPECT_EQ(lb.handled.load(), 0);
  const std::string ok = lb.exchange(post("/x", std::string(100, 'a')));
  EXPECT_NE(ok.find("{\"path\":\"/x\",\"body\":100}"), std::string::npos) << ok;
  const std::string sse = lb.exchange("GET /events HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_NE(sse.find("Content-Type: text/event-stream"), std::string::npos) << sse;
  EXPECT_NE(sse.find("data: {\"n\":1}\n\n\r\n0\r\n\r\n"), std::string::npos) << sse;
}

TEST(RequestServer, KeepAliveServesPipelinedRequestsInOrder) {
  Loopback lb(RequestServerConfig{});
  const std::string two = "GET /a HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  const std::string out = lb.exchange(two);
  const auto a = out.find("\"path\":\"/a\""), b = out.find("\"path\":\"/b\"");
  ASSERT_NE(a, std::string::npos) << out;
  ASSERT_NE(b, std::string::npos) << out;
  EXPECT_LT(a, b);
}

}  // namespace
}  // namespace uma::agent
