// listen_tcp: opens, binds and listens a TCP acceptor on host:port (port 0: any free one), the one
// way every TCP front end (umad's HTTP, the agent's KV-event stream, the gateway) claims its port.
// `what` names the listener in errors ("--http", "kv events"). Threading: none.
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ip/v6_only.hpp>

#include <cstdint>
#include <string>

#include "common/status.h"

namespace uma {

// `v6_only`: an IPv6 address takes IPv6 connections only (beside an IPv4 listener on the same port).
inline Status listen_tcp(boost::asio::ip::tcp::acceptor& acceptor, const std::string& host, std::uint16_t port,
                         const std::string& what, bool v6_only = false) {
  namespace asio = boost::asio;
  boost::system::error_code ec;
  const auto addr = asio::ip::make_address(host, ec);
  if (ec) return Status(ErrorCode::kInvalidArgument, what + ": bad address '" + host + "'");
  const asio::ip::tcp::endpoint ep(addr, port);
  if (acceptor.open(ep.protocol(), ec); ec) return Status(ErrorCode::kIo, what + " socket: " + ec.message());
  acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (v6_only && addr.is_v6()) acceptor.set_option(asio::ip::v6_only(true), ec);
  if (acceptor.bind(ep, ec); ec) {
    return Status(ErrorCode::kIo, what + ": cannot bind " + host + ":" + std::to_string(port) + ": " + ec.message());
  }
  if (acceptor.listen(asio::socket_base::max_listen_connections, ec); ec) return Status(ErrorCode::kIo, what + ": " + ec.message());
  return Status::Ok();
}

// The port a listening acceptor is bound to (0 when it is not).
inline std::uint16_t bound_port(const boost::asio::ip::tcp::acceptor& acceptor) {
  boost::system::error_code ec;
  return acceptor.local_endpoint(ec).port();
}

}  // namespace uma
