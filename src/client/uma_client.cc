#include "client/uma_client.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "net/unix_connect.h"

namespace uma {

std::unique_ptr<UmaClient> UmaClient::connect(const std::string& socket_path, Status* status) {
  const int fd = connect_unix(socket_path);
  if (fd < 0) {
    *status = Status(ErrorCode::kIo, "cannot connect to " + socket_path + ": " + std::strerror(errno));
    return nullptr;
  }
  *status = Status::Ok();
  return std::unique_ptr<UmaClient>(new UmaClient(fd));
}

UmaClient::~UmaClient() {
  if (fd_ >= 0) ::close(fd_);
}

Status UmaClient::write_all(std::string_view bytes) {
  std::lock_guard<std::mutex> lock(write_mu_);
  for (size_t off = 0; off < bytes.size();) {
    const ssize_t n = ::send(fd_, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Status(ErrorCode::kIo, std::string("send failed: ") + std::strerror(errno));
    off += static_cast<size_t>(n);
  }
  return Status::Ok();
}

Status UmaClient::send_raw(std::string_view bytes) { return write_all(bytes); }

Status UmaClient::send_request(const WireRequest& request) {
  std::string frame;
  append_frame(frame, encode_request(request));
  return write_all(frame);
}

Status UmaClient::send_cancel(const std::string& id) {
  std::string frame;
  append_frame(frame, encode_cancel(id));
  return write_all(frame);
}

Status UmaClient::send_metrics_request(bool prometheus) {
  std::string frame;
  append_frame(frame, encode_metrics_request(prometheus));
  return write_all(frame);
}

Status UmaClient::read_event(WireEvent* event, int timeout_ms) {
  while (true) {
    if (std::optional<FrameItem> f = rx_.next()) {
      if (f->error != ErrorCode::kOk) return Status(f->error, "frame from server over the client's limit");
      return parse_event(f->payload, event);
    }
    pollfd p{fd_, POLLIN, 0};
    const int r = ::poll(&p, 1, timeout_ms);
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) return Status(ErrorCode::kIo, "timed out waiting for the server");
    char buf[65536];
    const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Status(ErrorCode::kIo, "connection closed by the server");
    rx_.feed(std::string_view(buf, static_cast<size_t>(n)));
  }
}

}  // namespace uma
