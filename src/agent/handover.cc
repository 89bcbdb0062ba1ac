#include "agent/handover.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace uma::agent {

namespace {

constexpr int kMaxFds = 2;

// One message of `payload`'s bytes with room for kMaxFds descriptors in `control`.
struct Message {
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)] = {};
  iovec iov{};
  msghdr msg{};
  explicit Message(std::string& payload) : iov{payload.data(), payload.size()} {
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
  }
};

}  // namespace

Status send_handover(int socket_fd, const Handover& h) {
  std::string payload;
  for (const std::string& a : h.args) {
    if (a.find('\0') != std::string::npos) return {ErrorCode::kInvalidArgument, "an argument holds a NUL"};
    payload += a;
    payload.push_back('\0');
  }
  if (payload.size() > kHandoverMaxBytes) return {ErrorCode::kInvalidArgument, "the command line is too long to hand over"};
  if (h.log_fd < 0) return {ErrorCode::kInvalidArgument, "a handover needs the umad's log"};
  int fds[kMaxFds] = {h.log_fd, h.image_fd};
  const int n_fds = h.image_fd >= 0 ? 2 : 1;
  Message m(payload);
  msghdr& msg = m.msg;
  msg.msg_controllen = CMSG_SPACE(sizeof(int) * n_fds);
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int) * n_fds);
  std::memcpy(CMSG_DATA(c), fds, sizeof(int) * n_fds);
  ssize_t n;
  do {
    n = ::sendmsg(socket_fd, &msg, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return {ErrorCode::kIo, std::string("handover: ") + std::strerror(errno)};
  if (static_cast<std::size_t>(n) != payload.size()) return {ErrorCode::kIo, "handover: a short send"};
  return {};
}

Status receive_handover(int socket_fd, Handover* out, bool* closed) {
  *closed = false;
  std::string payload(kHandoverMaxBytes + 1, '\0');
  Message m(payload);
  msghdr& msg = m.msg;
  ssize_t n;
  do {
    n = ::recvmsg(socket_fd, &msg, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return {ErrorCode::kIo, std::string("handover: ") + std::strerror(errno)};
  std::vector<int> fds;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const std::size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (std::size_t i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
      fds.push_back(fd);
    }
  }
  const auto fail = [&fds](std::string why) {
    for (int fd : fds) ::close(fd);
    return Status(ErrorCode::kInvalidArgument, "handover: " + why);
  };
  if (n == 0 && fds.empty()) {
    *closed = true;
    return {};
  }
  if ((msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0) return fail("the message was cut");
  if (fds.empty() || fds.size() > kMaxFds) return fail("it carries " + std::to_string(fds.size()) + " descriptors");
  payload.resize(static_cast<std::size_t>(n));
  if (!payload.empty() && payload.back() != '\0') return fail("the last argument has no end");
  out->args.clear();
  for (std::size_t at = 0; at < payload.size();) {
    const std::size_t end = payload.find('\0', at);
    out->args.push_back(payload.substr(at, end - at));
    at = end + 1;
  }
  out->log_fd = fds[0];
  out->image_fd = fds.size() > 1 ? fds[1] : -1;
  return {};
}

}  // namespace uma::agent
