#include "net/blocking_socket.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "net/unix_connect.h"

namespace uma {

const char* describe(Read r) {
  switch (r) {
    case Read::kData: return "data";
    case Read::kEof: return "end of stream";
    case Read::kTimeout: return "timeout";
    case Read::kError: return "socket error";
    case Read::kStopped: return "stopped (end of run)";
  }
  return "?";
}

namespace {

int ms_until(BlockingClock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - BlockingClock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(std::min<long long>(left, 1 << 30));
}

// Waits for `events` on fd until the deadline: 1 ready, 0 timed out, -1 error (errno).
int wait_for(int fd, short events, BlockingClock::time_point deadline) {
  while (true) {
    pollfd p{fd, events, 0};
    const int r = ::poll(&p, 1, ms_until(deadline));
    if (r < 0 && errno == EINTR) continue;
    return r;
  }
}

std::string errno_text(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

}  // namespace

BlockingSocket& BlockingSocket::operator=(BlockingSocket&& o) noexcept {
  if (this != &o) {
    close();
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

BlockingSocket BlockingSocket::unix_stream(const std::string& path, std::string* error) {
  const int fd = connect_unix(path);
  if (fd < 0) *error = errno_text(("connect " + path).c_str());
  return BlockingSocket(fd);
}

BlockingSocket BlockingSocket::tcp(const std::string& host, int port, int rcvbuf, std::string* error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  if (const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res); rc != 0) {
    *error = std::string("resolve ") + host + ": " + ::gai_strerror(rc);
    return BlockingSocket();
  }
  BlockingSocket s(::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!s.valid()) {
    *error = errno_text("socket");
  } else {
    const int one = 1;
    ::setsockopt(s.fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (rcvbuf > 0) ::setsockopt(s.fd_, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
    int rc;
    do {
      rc = ::connect(s.fd_, res->ai_addr, res->ai_addrlen);
    } while (rc < 0 && errno == EINTR);
    if (rc < 0) {
      *error = errno_text(("connect " + host + ":" + std::to_string(port)).c_str());
      s.close();
    }
  }
  ::freeaddrinfo(res);
  return s;
}

bool BlockingSocket::send_all(std::string_view bytes, Clock::time_point deadline, std::string* error) {
  for (std::size_t off = 0; off < bytes.size();) {
    const ssize_t n = ::send(fd_, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      off += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      const int r = wait_for(fd_, POLLOUT, deadline);
      if (r == 0) {
        *error = "timed out sending (" + std::to_string(off) + " of " + std::to_string(bytes.size()) + " bytes sent)";
        return false;
      }
      if (r < 0) {
        *error = errno_text("poll");
        return false;
      }
      continue;
    }
    *error = errno_text("send");
    return false;
  }
  return true;
}

Read BlockingSocket::read_some(char* buf, std::size_t max, Clock::time_point deadline, std::size_t* n, std::string* error) {
  *n = 0;
  while (true) {
    const int r = wait_for(fd_, POLLIN, deadline);
    if (r == 0) {
      *error = "timed out reading";
      return Read::kTimeout;
    }
    if (r < 0) {
      *error = errno_text("poll");
      return Read::kError;
    }
    const ssize_t got = ::recv(fd_, buf, max, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    if (got < 0) {
      *error = errno_text("recv");
      return Read::kError;
    }
    if (got == 0) return Read::kEof;
    *n = static_cast<std::size_t>(got);
    return Read::kData;
  }
}

Read BlockingSocket::wait_eof(Clock::time_point deadline, std::string* error) {
  char buf[4096];
  std::size_t n = 0;
  Read r;
  while ((r = read_some(buf, sizeof buf, deadline, &n, error)) == Read::kData) {
  }
  return r;
}

void BlockingSocket::shutdown_write() {
  if (fd_ >= 0) ::shutdown(fd_, SHUT_WR);
}

void BlockingSocket::close_with_reset() {
  if (fd_ < 0) return;
  const linger l{1, 0};
  ::setsockopt(fd_, SOL_SOCKET, SO_LINGER, &l, sizeof l);
  close();
}

void BlockingSocket::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

bool Pacer::before_read() {
  std::chrono::milliseconds wait{0};
  if (p_.stall.count() > 0 && !stalled_ && bytes_ >= p_.stall_after && !first_) {
    stalled_ = true;
    wait = p_.stall;
  } else if (!first_) {
    wait = p_.pause;
  }
  first_ = false;
  if (wait.count() == 0) return true;
  // The slow reader under test pauses here (not synchronisation); the run's end cuts it short.
  const BlockingClock::time_point until = BlockingClock::now() + wait;
  while (true) {
    if (p_.stop != nullptr && *p_.stop) return false;
    const BlockingClock::time_point now = BlockingClock::now();
    if (now >= until) return true;
    std::this_thread::sleep_for(std::min<BlockingClock::duration>(until - now, std::chrono::milliseconds(100)));
  }
}

}  // namespace uma
