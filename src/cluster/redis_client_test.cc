// RedisClient without a server: addresses, and an unreachable Redis is a typed error within the
// deadline (the heartbeat thread must never hang on it). With a server: tests/e2e/cluster_agent_test.cc.
#include "cluster/redis_client.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>

namespace uma::cluster {
namespace {

TEST(RedisAddress, HostPortOrHost) {
  RedisAddress a;
  ASSERT_TRUE(parse_redis_address("10.0.0.7:7000", &a));
  EXPECT_EQ(a.host, "10.0.0.7");
  EXPECT_EQ(a.port, 7000);
  ASSERT_TRUE(parse_redis_address("redis.local", &a));
  EXPECT_EQ(a.host, "redis.local");
  EXPECT_EQ(a.port, 6379);
  for (const char* bad : {"", ":6379", "h:", "h:0", "h:65536", "h:12x"}) EXPECT_FALSE(parse_redis_address(bad, &a)) << bad;
}

TEST(RedisClient, AListenerThatNeverAnswersCostsTheDeadlineAndAnIoError) {
  // A socket that listens but never accepts or answers: the connect succeeds (the kernel's
  // backlog), the command's read times out.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(fd, 4), 0);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  RedisClient c({"127.0.0.1", ntohs(a.sin_port)}, std::chrono::milliseconds(100));
  const auto start = std::chrono::steady_clock::now();
  const Status st = c.command({"PING"});
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(st.code(), ErrorCode::kIo) << st.to_string();
  EXPECT_LT(took, std::chrono::seconds(2)) << "bounded by the deadline, not the kernel's";
  EXPECT_FALSE(c.connected()) << "dropped: the next call dials again";
  ::close(fd);
}

}  // namespace
}  // namespace uma::cluster
