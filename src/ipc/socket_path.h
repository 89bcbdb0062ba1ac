// Claiming the Unix socket path safely at start-up.
//
// prepare_socket_path(): if nothing is there, fine; if a socket is there and a live daemon answers
// on it, refuse (kInvalidArgument: another daemon is running); if it is a stale socket nobody
// answers on, remove it; if it is anything other than a socket, refuse and touch nothing.
//
// activated_socket(): socket activation (systemd's sd_listen_fds protocol, which
// systemd-socket-activate speaks too): when LISTEN_PID is this process and LISTEN_FDS names one
// descriptor, descriptor 3 is the listening socket the service manager made (with the mode and
// group its unit names). It must be a listening Unix stream socket bound to `path`; the variables
// are removed so no child inherits them. -1 when not activated; kInvalidArgument when activated
// with something else (more than one descriptor, another path, not a listening Unix socket).
#pragma once

#include <string>

#include "common/status.h"

namespace uma {

Status prepare_socket_path(const std::string& path);
Status activated_socket(const std::string& path, int* fd);

}  // namespace uma
