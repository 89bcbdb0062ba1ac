#include "agent/handover.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace uma::agent {

namespace {

constexpr char kHandoverTag = 'H';
constexpr char kPinSetTag = 'P';
constexpr std::size_t kMaxFds = kMaxPinnedImages;

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

Status send_message(int socket_fd, std::string payload, const std::vector<int>& fds) {
  Message m(payload);
  msghdr& msg = m.msg;
  if (fds.empty()) {
    msg.msg_control = nullptr;
    msg.msg_controllen = 0;
  } else {
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  }
  ssize_t n;
  do {
    n = ::sendmsg(socket_fd, &msg, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return {ErrorCode::kIo, std::string("standby message: ") + std::strerror(errno)};
  if (static_cast<std::size_t>(n) != payload.size()) return {ErrorCode::kIo, "standby message: a short send"};
  return {};
}

}  // namespace

Status send_handover(int socket_fd, const Handover& h) {
  std::string payload(1, kHandoverTag);
  for (const std::string& a : h.args) {
    if (a.find('\0') != std::string::npos) return {ErrorCode::kInvalidArgument, "an argument holds a NUL"};
    payload += a;
    payload.push_back('\0');
  }
  if (payload.size() > kHandoverMaxBytes) return {ErrorCode::kInvalidArgument, "the command line is too long to hand over"};
  if (h.log_fd < 0) return {ErrorCode::kInvalidArgument, "a handover needs the umad's log"};
  std::vector<int> fds = {h.log_fd};
  if (h.image_fd >= 0) fds.push_back(h.image_fd);
  return send_message(socket_fd, std::move(payload), fds);
}

Status send_pin_set(int socket_fd, const std::vector<int>& image_fds) {
  if (image_fds.size() > kMaxPinnedImages) return {ErrorCode::kInvalidArgument, "a pin set names at most 16 images"};
  return send_message(socket_fd, std::string(1, kPinSetTag), image_fds);
}

Status receive_standby_message(int socket_fd, StandbyMessage* out, bool* closed) {
  *closed = false;
  std::string payload(kHandoverMaxBytes + 1, '\0');
  Message m(payload);
  msghdr& msg = m.msg;
  ssize_t n;
  do {
    n = ::recvmsg(socket_fd, &msg, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return {ErrorCode::kIo, std::string("standby message: ") + std::strerror(errno)};
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
    return Status(ErrorCode::kInvalidArgument, "standby message: " + why);
  };
  if (n == 0 && fds.empty()) {
    *closed = true;
    return {};
  }
  if ((msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0) return fail("the message was cut");
  payload.resize(static_cast<std::size_t>(n));
  if (payload.empty()) return fail("it has no kind");
  *out = {};
  if (payload[0] == kPinSetTag) {
    if (payload.size() != 1) return fail("a pin set carries bytes");
    out->is_pin_set = true;
    out->images = std::move(fds);
    return {};
  }
  if (payload[0] != kHandoverTag) return fail("an unknown kind");
  if (fds.empty() || fds.size() > 2) return fail("a handover carries " + std::to_string(fds.size()) + " descriptors");
  if (payload.size() > 1 && payload.back() != '\0') return fail("the last argument has no end");
  for (std::size_t at = 1; at < payload.size();) {
    const std::size_t end = payload.find('\0', at);
    out->handover.args.push_back(payload.substr(at, end - at));
    at = end + 1;
  }
  out->handover.log_fd = fds[0];
  out->handover.image_fd = fds.size() > 1 ? fds[1] : -1;
  return {};
}

}  // namespace uma::agent
