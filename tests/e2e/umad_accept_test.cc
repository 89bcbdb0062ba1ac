// Accepting survives descriptor exhaustion and connection floods on both front ends: umad runs
// under a low RLIMIT_NOFILE, a flood of idle connections takes every descriptor, and when the
// flood closes the Unix socket and HTTP both serve again; meanwhile umad backs off (its failed
// attempts at most one per backoff period) and does not flood its log. --max-connections caps
// HTTP as it caps the socket. How soon they serve again is printed, not asserted.
#include <gtest/gtest.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include "e2e/daemon_harness.h"
#include "e2e/http_client.h"
#include "e2e/json_helpers.h"
#include "e2e/oracle.h"

namespace uma::test {
namespace {

using namespace std::chrono_literals;

// A non-blocking connect (a flood must not wait on a full listen queue). -1 on failure.
int connect_nonblocking(const sockaddr* addr, socklen_t len, int family) {
  const int fd = ::socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (::connect(fd, addr, len) != 0 && errno != EINPROGRESS) {
    ::close(fd);
    return -1;
  }
  return fd;
}

sockaddr_in loopback(int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

int connect_tcp(int port) {
  const sockaddr_in a = loopback(port);
  return connect_nonblocking(reinterpret_cast<const sockaddr*>(&a), sizeof a, AF_INET);
}

int connect_uds(const std::string& path) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::snprintf(a.sun_path, sizeof a.sun_path, "%s", path.c_str());
  return connect_nonblocking(reinterpret_cast<const sockaddr*>(&a), sizeof a, AF_UNIX);
}

// One HTTP exchange on a fresh connection: the whole response up to the server's close, or ""
// if nothing came within `timeout`.
std::string http_exchange(int port, const std::string& request, std::chrono::milliseconds timeout = kHangGuard) {
  const int fd = connect_tcp(port);
  if (fd < 0) return "";
  std::string out;
  bool sent = false;
  const auto deadline = TestClock::now() + timeout;
  while (TestClock::now() < deadline) {
    pollfd p{fd, static_cast<short>(sent ? POLLIN : POLLOUT), 0};
    if (::poll(&p, 1, 20) <= 0) continue;
    if (!sent) {
      sent = ::send(fd, request.data(), request.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(request.size());
      if (!sent) break;
      continue;
    }
    char buf[4096];
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

const std::string kHealth = "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";

// CPU seconds (user + system) the process has used so far.
double cpu_seconds(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::istringstream rest(stat.substr(stat.rfind(')') + 2));
  std::string field;
  long ticks = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14 || i == 15) ticks += std::stol(field);  // utime, stime
  }
  return double(ticks) / double(::sysconf(_SC_CLK_TCK));
}

long log_lines(const Daemon& d) {
  const std::string log = d.log();
  return static_cast<long>(std::count(log.begin(), log.end(), '\n'));
}

// Every "resumed after N failed attempts over M ms" line of the log: (N, M).
std::vector<std::pair<long, long>> accept_resumptions(const std::string& log) {
  std::vector<std::pair<long, long>> out;
  const std::string key = ": resumed after ";
  for (std::size_t at = log.find(key); at != std::string::npos; at = log.find(key, at + 1)) {
    long n = -1, ms = -1;
    if (std::sscanf(log.c_str() + at + key.size(), "%ld failed attempts over %ld ms", &n, &ms) == 2) out.emplace_back(n, ms);
  }
  return out;
}

TEST(UmadAccept, BothSocketsServeAgainAfterADescriptorFloodAndAcceptingBacksOffMeanwhile) {
  const int kLimit = 64;
  // --http-timeout-sec 3600: the flood's idle connections stay however long the test takes.
  Daemon d(args({"--http", "127.0.0.1:0", "--max-tokens", "16", "--http-timeout-sec", "3600"}), "oracle.gguf", kLimit);
  ASSERT_TRUE(d.started()) << d.log();
  const int port = http_port(d);
  ASSERT_GT(port, 0) << d.log();

  // The flood: three times the daemon's descriptors, idle, on both front ends.
  std::vector<int> flood;
  for (int i = 0; i < 3 * kLimit; ++i) {
    const int a = connect_uds(d.socket());
    const int b = connect_tcp(port);
    if (a >= 0) flood.push_back(a);
    if (b >= 0) flood.push_back(b);
  }
  ASSERT_GT(flood.size(), static_cast<size_t>(2 * kLimit));
  // Wait (on the log, the condition) until both front ends have run out and paused accepting.
  const auto paused_on = [&](const char* name) {
    return d.log().find(std::string("accept on ") + name + ": Too many open files") != std::string::npos;
  };
  ASSERT_TRUE(eventually([&] { return paused_on("unix socket") && paused_on("http"); }, "both front ends to pause accepting"))
      << d.log();
  // While the flood holds, a window of one second: the log gains no line per attempt. (A slower
  // machine makes fewer attempts, never more.) CPU time is printed; the backoff is checked below.
  const double cpu0 = cpu_seconds(d.pid());
  const long lines0 = log_lines(d);
  std::this_thread::sleep_for(1s);  // a measurement window, not a synchronisation
  const double cpu_during = cpu_seconds(d.pid()) - cpu0;
  const long lines_during = log_lines(d) - lines0;
  EXPECT_LE(lines_during, 4) << d.log();

  for (int fd : flood) ::close(fd);
  const auto closed_at = TestClock::now();
  // Both sockets answer again. One client on each right away: each waits its turn in its listen
  // queue behind the flood's closed connections (a retry after a short timeout would only join
  // the back of the queue again).
  const auto ms_since_close = [&] {
    return static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(TestClock::now() - closed_at).count());
  };
  Status st;
  auto uds = UmaClient::connect(d.socket(), &st);
  bool uds_ok = uds && uds->send_metrics_request().ok();
  const bool http_ok = static_cast<bool>(
      eventually([&] { return status_of(http_exchange(port, kHealth)) == 200; }, "HTTP to answer again"));
  const long long http_ms = ms_since_close();
  WireEvent ev;
  uds_ok = uds_ok && uds->read_event(&ev, kHangGuardMs).ok() && ev.kind == WireEvent::Kind::kMetrics;
  const long long uds_ms = ms_since_close();
  std::printf("flood: %zu connections; during 1 s: %.3f CPU s, %ld log lines; HTTP back %lld ms, Unix socket %lld ms "
              "after the flood closed\n", flood.size(), cpu_during, lines_during, http_ms, uds_ms);
  EXPECT_TRUE(http_ok) << "timed out waiting for HTTP to answer after the flood closed\n" << d.log();
  EXPECT_TRUE(uds_ok) << "timed out waiting for the Unix socket to answer after the flood closed\n" << d.log();
  // And they serve exact completions, on both front ends.
  auto c = connect(d);
  ASSERT_TRUE(c);
  ASSERT_TRUE(c->send_request(request("a", "hello world", 8)).ok());
  EXPECT_EQ(read_reply(*c).text, oracle().expected_text("hello world", 8));
  const std::string r = http_exchange(port, post("/v1/completions", R"({"prompt":"hello world","max_tokens":8})", false));
  ASSERT_EQ(status_of(r), 200) << r;
  const auto body = nlohmann::json::parse(body_of(r));
  EXPECT_EQ(body["choices"][0]["text"], oracle().expected_text("hello world", 8));
  const auto m = metrics(d);
  EXPECT_GE(m["accept_pauses_total"].get<int>(), 2);
  EXPECT_NE(d.log().find("accept on http: resumed after"), std::string::npos) << d.log();
  EXPECT_NE(d.log().find("accept on unix socket: resumed after"), std::string::npos) << d.log();
  // No spinning: attempts come one a backoff period (10 ms at the least; timers never fire early),
  // so an episode of M ms holds at most M / 10 + 1 of them. A spinning loop makes thousands.
  const auto resumptions = accept_resumptions(d.log());
  EXPECT_GE(resumptions.size(), 2u) << d.log();
  for (const auto& [attempts, ms] : resumptions) {
    EXPECT_LE(attempts, ms / 10 + 1) << attempts << " failed accepts in " << ms << " ms: umad spins while out of descriptors";
  }
  EXPECT_EQ(d.stop(), 0) << d.log();
}

TEST(UmadAccept, MaxConnectionsCapsHttpToo) {
  // --http-timeout-sec 3600: the held idle connections stay however long the test takes.
  Daemon d(args({"--http", "127.0.0.1:0", "--max-connections", "4", "--http-timeout-sec", "3600"}));
  ASSERT_TRUE(d.started()) << d.log();
  const int port = http_port(d);
  std::vector<int> held;
  for (int i = 0; i < 4; ++i) held.push_back(connect_tcp(port));
  // The daemon counts what it holds; wait for all four before the fifth.
  ASSERT_TRUE(eventually([&] { return metrics(d)["http_connections_open"] == 4; }, "four HTTP connections open"))
      << metrics(d).dump();
  // Closed at once, unanswered: the exchange ends on the server's close.
  EXPECT_EQ(http_exchange(port, kHealth), "");
  EXPECT_TRUE(eventually([&] { return metrics(d)["http_connections_rejected_total"] == 1; }, "the fifth connection counted rejected"))
      << metrics(d).dump();
  ::close(held.back());
  held.pop_back();
  // Once the daemon has seen that close, a new connection is served.
  ASSERT_TRUE(eventually([&] { return metrics(d)["http_connections_open"] == 3; }, "the closed connection to be let go"))
      << metrics(d).dump();
  const std::string r = http_exchange(port, kHealth);
  EXPECT_EQ(r.rfind("HTTP/1.1 200", 0), 0u) << r;
  EXPECT_EQ(metrics(d)["http_connections_rejected_total"], 1);
  for (int fd : held) ::close(fd);
  EXPECT_EQ(d.stop(), 0) << d.log();
}

}  // namespace
}  // namespace uma::test
