// A real nginx (Debian's) serving a directory on a free loopback port, for the model store's remote
// tier: Range works as shipped, `limit_rate` emulates a link of known bandwidth (nginx applies it
// per request, with one second's worth sent at once). Everything it writes (config, pid, temp
// paths, its log) stays in its own temp directory, so it runs as root without touching /var.
// kill() is SIGKILL to the master and its worker (their process group): established transfers
// break as in a crash; start() again serves on the same port.
// Thread-safety: one thread drives it; kill()/start() may run while other threads transfer.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace uma::test {

// True when this machine cannot run the remote tier's tests (no nginx, or a build without
// libcurl) AND the run allows skipping them (UMA_ALLOW_SKIP_REMOTE=1, as scripts/gpu_check.sh sets
// on a GPU server set up from the offline bundle). Elsewhere (CI) a missing piece fails the test.
bool skip_remote_tier_tests();

class NginxServer {
 public:
  struct Options {
    std::string limit_rate = "0";  // nginx's syntax: "0" (no limit), "64k", "1m"
    std::string extra;             // more directives inside the server block (locations)
    // Non-empty: a reverse proxy in front of these loopback ports instead of a file server, as
    // deploy/compose/nginx.conf puts it in front of the gateways (a request a server refuses or
    // answers 502/503 before any byte goes to the next).
    std::vector<int> upstreams;
  };
  NginxServer() : NginxServer(Options{}) {}
  explicit NginxServer(Options options);
  ~NginxServer();  // kills it and removes the temp directory
  NginxServer(const NginxServer&) = delete;
  NginxServer& operator=(const NginxServer&) = delete;

  bool start();  // spawns it and waits until a TCP connect succeeds (10 s at most)
  void kill();   // SIGKILL to the process group, master reaped
  int port() const { return port_; }
  const std::string& root() const { return root_; }  // the served directory (world-readable)
  std::string url(const std::string& path) const { return "http://127.0.0.1:" + std::to_string(port_) + "/" + path; }
  std::string log() const;  // nginx's stderr so far (for a failing test's message)

 private:
  Options options_;
  int port_ = -1;
  std::string dir_, root_, conf_, log_;
  pid_t pid_ = -1;
};

}  // namespace uma::test
