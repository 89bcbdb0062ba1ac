// A real redis-server (Debian's) for the cluster tests: on a free loopback port, no persistence,
// killed with the test. kill() is `kill -9` (a crash); start() again brings it back, empty, on the
// same port.
#pragma once

#include <sys/types.h>

#include <string>

#include "cluster/redis_client.h"

namespace uma::test {

int free_loopback_port();

class RedisServer {
 public:
  RedisServer();
  // A server that requires this password (requirepass); the harness's own client sends it.
  explicit RedisServer(std::string password);
  ~RedisServer();
  bool start();  // spawns it and waits until it answers PING (the hang guard at most)
  void kill();   // SIGKILL, reaped
  int port() const { return port_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  // The address as the cluster layer takes it (the password included).
  cluster::RedisAddress cluster_address() const { return {"127.0.0.1", port_, "", password_}; }

 private:
  int port_;
  std::string password_;
  pid_t pid_ = -1;
};

}  // namespace uma::test
