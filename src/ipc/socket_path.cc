#include "ipc/socket_path.h"

#include "net/unix_connect.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

namespace uma {
namespace {

bool someone_listens(const std::string& path) {
  const int fd = connect_unix(path);
  if (fd < 0) return false;
  ::close(fd);
  return true;
}

}  // namespace

Status prepare_socket_path(const std::string& path) {
  if (path.empty() || path.size() >= sizeof(sockaddr_un{}.sun_path)) {
    return Status(ErrorCode::kInvalidArgument, "socket path '" + path + "' is empty or too long");
  }
  struct stat st{};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return Status::Ok();
    return Status(ErrorCode::kIo, "cannot stat '" + path + "': " + std::strerror(errno));
  }
  if (!S_ISSOCK(st.st_mode)) {
    return Status(ErrorCode::kInvalidArgument, "'" + path + "' exists and is not a socket; refusing to remove it");
  }
  if (someone_listens(path)) {
    return Status(ErrorCode::kInvalidArgument, "a daemon is already serving on '" + path + "'");
  }
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    return Status(ErrorCode::kIo, "cannot remove stale socket '" + path + "': " + std::strerror(errno));
  }
  return Status::Ok();
}

Status activated_socket(const std::string& path, int* fd) {
  *fd = -1;
  const char* pid = std::getenv("LISTEN_PID");
  const char* fds = std::getenv("LISTEN_FDS");
  if (pid == nullptr || fds == nullptr || std::strtol(pid, nullptr, 10) != static_cast<long>(::getpid())) return Status::Ok();
  const long n = std::strtol(fds, nullptr, 10);
  ::unsetenv("LISTEN_PID");
  ::unsetenv("LISTEN_FDS");
  ::unsetenv("LISTEN_FDNAMES");
  constexpr int kFirst = 3;  // SD_LISTEN_FDS_START
  if (n != 1) return Status(ErrorCode::kInvalidArgument, "socket activation passed " + std::to_string(n) + " descriptors; umad takes one");
  int listening = 0, type = 0;
  socklen_t len = sizeof listening;
  sockaddr_un addr{};
  socklen_t alen = sizeof addr;
  if (::getsockopt(kFirst, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 || listening == 0 ||
      ::getsockopt(kFirst, SOL_SOCKET, SO_TYPE, &type, &(len = sizeof type)) != 0 || type != SOCK_STREAM ||
      ::getsockname(kFirst, reinterpret_cast<sockaddr*>(&addr), &alen) != 0 || addr.sun_family != AF_UNIX) {
    return Status(ErrorCode::kInvalidArgument, "socket activation: descriptor 3 is not a listening Unix stream socket");
  }
  if (std::string(addr.sun_path) != path) {
    return Status(ErrorCode::kInvalidArgument, "socket activation passed a socket at '" + std::string(addr.sun_path) +
                                                   "', not --socket '" + path + "'");
  }
  ::fcntl(kFirst, F_SETFD, FD_CLOEXEC);  // a model router's umads get sockets of their own
  *fd = kFirst;
  return Status::Ok();
}

}  // namespace uma
