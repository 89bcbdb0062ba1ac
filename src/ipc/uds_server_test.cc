// UdsServer's exception boundary over a real Unix socket, the I/O loop on its own thread: what a
// handler throws is an E_INTERNAL error for that connection only.
#include "ipc/uds_server.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <boost/asio/post.hpp>

#include <stdexcept>
#include <thread>

#include "client/uma_client.h"

namespace uma {
namespace {

TEST(UdsServerBoundary, AThrowingHandlerIsAnInternalErrorAndTheServerServesOn) {
  boost::asio::io_context io;
  ServerMetrics metrics;
  ServerConfig cfg;
  cfg.socket_path = "/tmp/uma-uds-boundary-" + std::to_string(::getpid()) + ".sock";
  SessionSlots slots(16);
  StreamServer serving(io, metrics, slots, [](WorkItem item) {
    if (std::holds_alternative<Request>(item)) throw std::runtime_error("queue bug");
  });
  UdsServer server(io, cfg, metrics, serving);
  ASSERT_TRUE(server.listen().ok());
  serving.start();
  server.start();
  std::thread loop([&io] { io.run(); });

  Status st;
  auto client = UmaClient::connect(cfg.socket_path, &st);
  ASSERT_TRUE(client) << st.to_string();
  WireRequest r;
  r.id = "a";
  r.prompt = "hi";
  ASSERT_TRUE(client->send_request(r).ok());
  WireEvent ev;
  ASSERT_TRUE(client->read_event(&ev, 10000).ok());
  EXPECT_EQ(ev.kind, WireEvent::Kind::kError);
  EXPECT_EQ(ev.code, "E_INTERNAL");
  EXPECT_EQ(ev.id, "a");
  EXPECT_EQ(client->read_event(&ev, 10000).code(), ErrorCode::kIo);  // closed
  EXPECT_EQ(metrics.errors(ErrorCode::kInternal), 1u);

  auto second = UmaClient::connect(cfg.socket_path, &st);
  ASSERT_TRUE(second) << st.to_string();
  ASSERT_TRUE(second->send_metrics_request().ok());
  ASSERT_TRUE(second->read_event(&ev, 10000).ok());
  EXPECT_EQ(ev.kind, WireEvent::Kind::kMetrics);

  boost::asio::post(io, [&] {
    server.stop_accepting();
    serving.begin_shutdown();
    serving.finish_shutdown(std::chrono::seconds(1), [&io] { io.stop(); });
  });
  loop.join();
}

}  // namespace
}  // namespace uma
