// What the agent says to a standby umad (daemon/standby.h), each message one datagram on a Unix
// socket pair, its first byte its kind:
// - a handover turns the standby into a model's umad: the command line to run (the arguments after
//   argv[0], each ended by a NUL) and, by SCM_RIGHTS, the umad's log (its stdout and stderr from
//   then on) and optionally the model's image;
// - a pin set names, by SCM_RIGHTS, the DRAM tier's images (memfds) the standby keeps pinned while
//   it waits (runtime/host_pins.h); each set replaces the last.
// The agent sends them (agent/model_process.h); the standby receives them.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace uma::agent {

inline constexpr std::size_t kHandoverMaxBytes = 64 * 1024;
inline constexpr std::size_t kMaxPinnedImages = 16;

struct Handover {
  std::vector<std::string> args;  // after argv[0]
  int log_fd = -1;
  int image_fd = -1;  // -1: the arguments name the model
};

// Sends `h` (its descriptors are duplicated into the receiver; the caller keeps its own).
Status send_handover(int socket_fd, const Handover& h);
// Sends a pin set (at most kMaxPinnedImages; an empty set releases every pin).
Status send_pin_set(int socket_fd, const std::vector<int>& image_fds);

struct StandbyMessage {
  bool is_pin_set = false;
  Handover handover;        // when not a pin set
  std::vector<int> images;  // a pin set's
};
// Blocks for one message. *closed is set (and ok returned) when the peer closed without sending.
// The descriptors received are the caller's to close.
Status receive_standby_message(int socket_fd, StandbyMessage* out, bool* closed);

}  // namespace uma::agent
