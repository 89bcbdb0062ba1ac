// HttpServer's exception boundary, on a real loopback socket with the I/O loop on its own thread:
// whatever a handler throws is a 500 in OpenAI's shape for that connection only.
#include "http/http_server.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <boost/asio/post.hpp>

#include <atomic>
#include <stdexcept>
#include <thread>

#include "net/loopback_test_client.h"

namespace uma {
namespace {

class LoopbackHttp {
 public:
  explicit LoopbackHttp(WorkSubmit submit, HttpServer::ChatTemplate chat, std::vector<std::string> more_hosts = {}) {
    HttpConfig cfg;
    cfg.port = 0;
    cfg.more_hosts = std::move(more_hosts);
    serving_ = std::make_unique<StreamServer>(io_, metrics, slots, std::move(submit));
    server_ = std::make_unique<HttpServer>(io_, cfg, metrics, *serving_);
    EXPECT_TRUE(server_->listen().ok());
    serving_->start();
    server_->start();
    server_->set_ready("m.gguf", std::move(chat));
    port_ = server_->port();
    loop_ = std::thread([this] { io_.run(); });
  }
  ~LoopbackHttp() {
    boost::asio::post(io_, [this] {
      server_->stop_accepting();
      serving_->begin_shutdown();
      serving_->finish_shutdown(std::chrono::seconds(1), [this] { io_.stop(); });
    });
    loop_.join();
  }
  std::string exchange(const std::string& request, std::uint32_t address = INADDR_LOOPBACK) const {
    return loopback_exchange(port_, request, address);
  }
  ServerMetrics metrics;
  SessionSlots slots{16, {nullptr, &metrics.http_sessions_open}};

 private:
  boost::asio::io_context io_;
  std::unique_ptr<StreamServer> serving_;
  std::unique_ptr<HttpServer> server_;
  std::uint16_t port_ = 0;
  std::thread loop_;
};

std::string post(const std::string& path, const std::string& body) {
  return "POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

void expect_internal_error(const std::string& response) {
  ASSERT_EQ(response.rfind("HTTP/1.1 500", 0), 0u) << response;
  EXPECT_NE(response.find("Connection: close"), std::string::npos) << response;
  const auto body = nlohmann::json::parse(response.substr(response.find("\r\n\r\n") + 4));
  EXPECT_EQ(body["error"]["type"], "server_error");
  EXPECT_EQ(body["error"]["code"], "internal");
}

TEST(HttpServerBoundary, AThrowingChatRendererIsA500AndTheServerServesOn) {
  LoopbackHttp s([](WorkItem) {}, [](const ChatRequest&, ChatPrompt*) -> Status {
    throw std::runtime_error("renderer bug");
  });
  expect_internal_error(s.exchange(post("/v1/chat/completions", R"({"messages":[{"role":"user","content":"hi"}]})")));
  EXPECT_EQ(s.metrics.errors(ErrorCode::kInternal), 1u);
  const std::string health = s.exchange("GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(health.rfind("HTTP/1.1 200", 0), 0u) << health;
}

TEST(HttpServerBoundary, AThrowingSubmitIsA500AndFreesTheSessionSlot) {
  std::atomic<int> cancels{0};
  LoopbackHttp s(
      [&cancels](WorkItem item) {
        if (std::holds_alternative<Request>(item)) throw std::runtime_error("queue bug");
        ++cancels;
      },
      nullptr);
  for (int i = 0; i < 20; ++i) {  // more than max_sessions (16): every slot came back
    expect_internal_error(s.exchange(post("/v1/completions", R"({"prompt":"hi"})")));
  }
  EXPECT_EQ(s.metrics.errors(ErrorCode::kInternal), 20u);
  EXPECT_EQ(s.metrics.http_sessions_open.load(), 0);
  EXPECT_EQ(s.slots.in_use(), 0);
  EXPECT_EQ(cancels, 20);
}

// llama-server's --host a,b: one server, a listener per address, all on one port.
TEST(HttpServerHosts, EveryAddressOfHostIsServedOnThePortTheFirstBound) {
  LoopbackHttp s([](WorkItem) {}, nullptr, {"127.0.0.2"});
  const std::string get = "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  EXPECT_EQ(s.exchange(get).rfind("HTTP/1.1 200", 0), 0u);
  EXPECT_EQ(s.exchange(get, 0x7f000002).rfind("HTTP/1.1 200", 0), 0u) << "127.0.0.2";
  EXPECT_EQ(s.exchange(get, 0x7f000003), "") << "nothing listens on an address not asked for";
}

TEST(HttpServerHosts, HostAndPortParseAsLlamaServerTakesThem) {
  HttpConfig c;
  ASSERT_TRUE(parse_http_hosts("0.0.0.0, ::,", 9000, &c).ok());
  EXPECT_EQ(c.host, "0.0.0.0");
  EXPECT_EQ(c.more_hosts, std::vector<std::string>{"::"});
  EXPECT_EQ(c.port, 9000);
  HttpConfig d;
  ASSERT_TRUE(parse_http_hosts("[::1]", -1, &d).ok());
  EXPECT_EQ(d.host, "::1");
  EXPECT_TRUE(d.more_hosts.empty());
  EXPECT_EQ(d.port, 8080) << "the port stays when not given";
  ASSERT_TRUE(parse_http_hosts("", 0, &d).ok());
  EXPECT_EQ(d.host, "::1") << "the hosts stay when not given";
  EXPECT_EQ(d.port, 0);
  EXPECT_EQ(parse_http_hosts("/tmp/llama.sock", 8080, &c).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(parse_http_hosts("localhost", 8080, &c).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(parse_http_hosts(" , ", 8080, &c).code(), ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace uma
