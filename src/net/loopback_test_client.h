// loopback_exchange: the unit tests' client of a server on 127.0.0.1 (http_server_test,
// agent_api_test): sends `request` on a new TCP connection and reads until the server closes it
// (or 10 s pass); "" when nothing listens. `address`: another IPv4 loopback address (127.x.y.z,
// host order). Tests only; blocking POSIX sockets.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstdint>
#include <string>

namespace uma {

inline std::string loopback_exchange(std::uint16_t port, const std::string& request, std::uint32_t address = INADDR_LOOPBACK) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(address);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return "";
  }
  timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) out.append(buf, static_cast<std::size_t>(n));
  ::close(fd);
  return out;
}

}  // namespace uma
