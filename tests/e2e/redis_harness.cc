#include "e2e/redis_harness.h"

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "cluster/redis_client.h"
#include "e2e/daemon_harness.h"

namespace uma::test {

int free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    ::close(fd);
    return -1;
  }
  ::close(fd);
  return ntohs(a.sin_port);
}

RedisServer::RedisServer() : port_(free_loopback_port()) {}
RedisServer::RedisServer(std::string password) : port_(free_loopback_port()), password_(std::move(password)) {}

RedisServer::~RedisServer() { kill(); }

bool RedisServer::start() {
  // Debian's, or the one scripts/setup.sh --from-bundle unpacked into the cache's prefix (with its
  // libraries beside it: an offline GPU machine has no apt).
  std::vector<std::string> argv = {"/usr/bin/redis-server"};
  if (::access(argv[0].c_str(), X_OK) != 0) {
    const std::string prefix = deps_prefix();
    argv = {"/usr/bin/env", "LD_LIBRARY_PATH=" + prefix + "/usr/lib/x86_64-linux-gnu", prefix + "/usr/bin/redis-server"};
  }
  argv.insert(argv.end(), {"--port", std::to_string(port_), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"});
  if (!password_.empty()) argv.insert(argv.end(), {"--requirepass", password_});
  pid_ = spawn_process(argv, temp_dir() + "/redis-" + std::to_string(port_) + ".log");
  cluster::RedisClient c({"127.0.0.1", port_, "", password_}, std::chrono::milliseconds(200));
  for (auto end = std::chrono::steady_clock::now() + kHangGuard; std::chrono::steady_clock::now() < end;) {
    cluster::RedisReply r;
    if (c.command({"PING"}, &r).ok() && r.str == "PONG") return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // a poll interval while it starts
  }
  return false;
}

void RedisServer::kill() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

}  // namespace uma::test
