#include "ipc/socket_path.h"

#include "net/unix_connect.h"

#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

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

}  // namespace uma
