#include "e2e/nginx_harness.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include "e2e/daemon_harness.h"
#include "store/remote_fetch.h"

namespace uma::test {
namespace {

// redis_harness.cc's free_loopback_port(), kept here so this harness links without the cluster
// layer and daemon_harness (which redis_harness.cc needs).
int pick_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  int port = -1;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  ::close(fd);
  return port;
}

bool connects(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  ::close(fd);
  return ok;
}

}  // namespace

bool skip_remote_tier_tests() {
  const char* allow = std::getenv("UMA_ALLOW_SKIP_REMOTE");
  if (allow == nullptr || std::string(allow) != "1") return false;
  return !store::remote_tier_available() || ::access("/usr/sbin/nginx", X_OK) != 0;
}

NginxServer::NginxServer(Options options) : options_(std::move(options)), port_(pick_loopback_port()) {
  char tmpl[] = "/tmp/uma-nginx-XXXXXX";
  dir_ = ::mkdtemp(tmpl) ? tmpl : "";
  root_ = dir_ + "/www";
  conf_ = dir_ + "/nginx.conf";
  log_ = dir_ + "/nginx.log";
  std::filesystem::create_directories(root_);
  // The worker runs as `nobody` when we are root: it must be able to read the files.
  ::chmod(dir_.c_str(), 0755);
  ::chmod(root_.c_str(), 0755);
  std::ostringstream c;
  c << "daemon off;\nmaster_process on;\nworker_processes 1;\nerror_log stderr;\n"
    << "pid " << dir_ << "/nginx.pid;\n"
    << "events { worker_connections 128; }\n"
    << "http {\n  access_log off;\n  default_type application/octet-stream;\n"
    << "  client_body_temp_path " << dir_ << "/client_body;\n"
    << "  proxy_temp_path " << dir_ << "/proxy;\n"
    << "  fastcgi_temp_path " << dir_ << "/fastcgi;\n"
    << "  uwsgi_temp_path " << dir_ << "/uwsgi;\n"
    << "  scgi_temp_path " << dir_ << "/scgi;\n";
  if (options_.upstreams.empty()) {
    c << "  server {\n    listen 127.0.0.1:" << port_ << ";\n    root " << root_ << ";\n"
      << "    location / { limit_rate " << options_.limit_rate << "; }\n";
  } else {
    c << "  upstream backends {\n";
    for (int p : options_.upstreams) c << "    server 127.0.0.1:" << p << " max_fails=0;\n";
    c << "    keepalive 16;\n  }\n"
      << "  server {\n    listen 127.0.0.1:" << port_ << ";\n"
      << "    location / {\n      proxy_pass http://backends;\n      proxy_http_version 1.1;\n"
      << "      proxy_set_header Connection \"\";\n      proxy_buffering off;\n      proxy_read_timeout 1h;\n"
      << "      proxy_next_upstream error timeout http_502 http_503 non_idempotent;\n"
      << "      proxy_next_upstream_tries " << options_.upstreams.size() + 1 << ";\n    }\n";
  }
  c << options_.extra << "\n  }\n}\n";
  std::ofstream(conf_) << c.str();
}

NginxServer::~NginxServer() {
  kill();
  if (!dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
}

bool NginxServer::start() {
  if (pid_ > 0 || dir_.empty() || port_ <= 0) return false;
  // Everything the child needs is made before fork: after it, only async-signal-safe calls (the
  // test process has other threads, curl's among them).
  const std::vector<std::string> args = {"/usr/sbin/nginx", "-c", conf_, "-p", dir_ + "/", "-e", "stderr"};
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const int out = ::open(log_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (out < 0) return false;
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);  // its own group: kill() reaches the worker too
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // a test killed by ctest's timeout takes its master along
    if (::getppid() != parent) ::_exit(127);
    ::dup2(out, STDOUT_FILENO);
    ::dup2(out, STDERR_FILENO);
    ::close_range(3, ~0u, 0);  // not the test's sockets
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(out);
  if (pid < 0) return false;
  ::setpgid(pid, pid);  // also here: kill() may come before the child ran
  pid_ = pid;
  const auto end = std::chrono::steady_clock::now() + kHangGuard;
  while (std::chrono::steady_clock::now() < end) {
    if (connects(port_)) return true;
    if (::waitpid(pid_, nullptr, WNOHANG) == pid_) {  // exited: a bad config, a port taken
      pid_ = -1;
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // a poll interval while it starts
  }
  kill();
  return false;
}

void NginxServer::kill() {
  if (pid_ <= 0) return;
  ::kill(-pid_, SIGKILL);
  ::waitpid(pid_, nullptr, 0);
  pid_ = -1;
  // The worker (not our child) may hold the listening socket a moment longer: a start() right
  // after must not find the port taken, nor a connect reach the dying one.
  for (auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
       connects(port_) && std::chrono::steady_clock::now() < end;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // a poll interval while it exits
  }
}

std::string NginxServer::log() const {
  std::ifstream in(log_);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace uma::test
