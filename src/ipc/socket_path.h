// Claiming the Unix socket path safely at start-up.
//
// prepare_socket_path(): if nothing is there, fine; if a socket is there and a live daemon answers
// on it, refuse (kInvalidArgument: another daemon is running); if it is a stale socket nobody
// answers on, remove it; if it is anything other than a socket, refuse and touch nothing.
#pragma once

#include <string>

#include "common/status.h"

namespace uma {

Status prepare_socket_path(const std::string& path);

}  // namespace uma
