#include "tools/soak/conn.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/buffer.hpp>

#include <cerrno>
#include <cstring>
#include <thread>

#include "ipc/unix_connect.h"

namespace uma::soak {

namespace {

int ms_until(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(std::min<long long>(left, 1 << 30));
}

// Waits for `events` on fd until the deadline: 1 ready, 0 timed out, -1 error (errno).
int wait_for(int fd, short events, Clock::time_point deadline) {
  while (true) {
    pollfd p{fd, events, 0};
    const int r = ::poll(&p, 1, ms_until(deadline));
    if (r < 0 && errno == EINTR) continue;
    return r;
  }
}

std::string errno_text(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

}  // namespace

Socket& Socket::operator=(Socket&& o) noexcept {
  if (this != &o) {
    close();
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

Socket Socket::unix_stream(const std::string& path, std::string* error) {
  const int fd = connect_unix(path);
  if (fd < 0) *error = errno_text(("connect " + path).c_str());
  return Socket(fd);
}

Socket Socket::tcp(const std::string& host, int port, int rcvbuf, std::string* error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  if (const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res); rc != 0) {
    *error = std::string("resolve ") + host + ": " + ::gai_strerror(rc);
    return Socket();
  }
  Socket s(::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
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

bool Socket::send_all(std::string_view bytes, Clock::time_point deadline, std::string* error) {
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

Read Socket::read_some(char* buf, std::size_t max, Clock::time_point deadline, std::size_t* n, std::string* error) {
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

Read Socket::wait_eof(Clock::time_point deadline, std::string* error) {
  char buf[4096];
  std::size_t n = 0;
  Read r;
  while ((r = read_some(buf, sizeof buf, deadline, &n, error)) == Read::kData) {
  }
  return r;
}

void Socket::shutdown_write() {
  if (fd_ >= 0) ::shutdown(fd_, SHUT_WR);
}

void Socket::close_with_reset() {
  if (fd_ < 0) return;
  const linger l{1, 0};
  ::setsockopt(fd_, SOL_SOCKET, SO_LINGER, &l, sizeof l);
  close();
}

void Socket::close() {
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
  const Clock::time_point until = Clock::now() + wait;
  while (true) {
    if (p_.stop != nullptr && *p_.stop) return false;
    const Clock::time_point now = Clock::now();
    if (now >= until) return true;
    std::this_thread::sleep_for(std::min<Clock::duration>(until - now, std::chrono::milliseconds(100)));
  }
}

Read EventReader::next(WireEvent* ev, Clock::time_point deadline, std::string* error) {
  std::string buf(pacer_.chunk(), '\0');
  while (true) {
    if (std::optional<FrameItem> f = rx_.next()) {
      if (f->error != ErrorCode::kOk) {
        *error = "a frame from the server is over the client's limit";
        return Read::kError;
      }
      if (Status st = parse_event(f->payload, ev); !st.ok()) {
        *error = "unparseable event " + quote(f->payload);
        return Read::kError;
      }
      return Read::kData;
    }
    if (!pacer_.before_read()) return Read::kStopped;
    std::size_t n = 0;
    const Read r = s_.read_some(buf.data(), buf.size(), deadline, &n, error);
    if (r != Read::kData) return r;
    pacer_.after_read(n);
    rx_.feed(std::string_view(buf.data(), n));
  }
}

void HttpReader::reset() {
  rx_.reset();
  body_.clear();
  sse_ = SseSplitter();
}

bool HttpReader::take(std::string* error, bool* progress) {
  const bool head = rx_.head_done(), done = rx_.done();
  std::string bytes;
  if (!rx_.pump(&bytes, error)) return false;
  body_ += bytes;
  sse_.feed(bytes);
  *progress = !bytes.empty() || head != rx_.head_done() || done != rx_.done();
  return true;
}

Read HttpReader::pump(Clock::time_point deadline, std::string* error) {
  // Whatever is buffered first (a pipelined response's bytes, or the tail of the last read).
  bool progress = false;
  if (!take(error, &progress)) return Read::kError;
  if (progress || rx_.done()) return Read::kData;
  if (eof_) return Read::kEof;
  if (!pacer_.before_read()) return Read::kStopped;
  std::string buf(pacer_.chunk(), '\0');
  std::size_t n = 0;
  const Read r = s_.read_some(buf.data(), buf.size(), deadline, &n, error);
  if (r == Read::kEof) {
    eof_ = true;
    rx_.eof();  // ends a body delimited by the close; else it stays partial
    return take(error, &progress) ? Read::kData : Read::kError;  // the caller looks at what is complete
  }
  if (r != Read::kData) return r;
  pacer_.after_read(n);
  rx_.feed(std::string_view(buf.data(), n));
  return take(error, &progress) ? Read::kData : Read::kError;
}

Read HttpReader::header(Clock::time_point deadline, std::string* error) {
  while (!rx_.head_done()) {
    const Read r = pump(deadline, error);
    if (r != Read::kData) return r;
  }
  return Read::kData;
}

Read HttpReader::body(std::string* out, Clock::time_point deadline, std::string* error) {
  while (!rx_.done()) {
    const Read r = pump(deadline, error);
    if (r != Read::kData) return r;
  }
  *out = body_;
  return Read::kData;
}

Read HttpReader::next_data(std::string* data, Clock::time_point deadline, std::string* error) {
  while (true) {
    if (sse_.next(data)) return Read::kData;
    if (rx_.done()) return Read::kEof;
    const Read r = pump(deadline, error);
    if (r != Read::kData) return r;
  }
}

}  // namespace uma::soak
