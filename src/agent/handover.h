// The message that turns a standby umad into a model's umad (daemon/standby.h): one datagram on a
// Unix socket pair, the command line to run (the arguments after argv[0], each ended by a NUL) and,
// by SCM_RIGHTS, the umad's log (its stdout and stderr from then on) and optionally the model's
// image. The agent sends it (agent/model_process.h); the standby receives it.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace uma::agent {

inline constexpr std::size_t kHandoverMaxBytes = 64 * 1024;

struct Handover {
  std::vector<std::string> args;  // after argv[0]
  int log_fd = -1;
  int image_fd = -1;  // -1: the arguments name the model
};

// Sends `h` (its descriptors are duplicated into the receiver; the caller keeps its own).
Status send_handover(int socket_fd, const Handover& h);
// Blocks for one message. *closed is set (and ok returned) when the peer closed without sending.
// The descriptors received are the caller's to close.
Status receive_handover(int socket_fd, Handover* out, bool* closed);

}  // namespace uma::agent
