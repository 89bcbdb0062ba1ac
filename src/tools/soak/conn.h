// uma-soak's readers on the shared blocking socket (net/blocking_socket.h): framed JSON events
// (ipc/frame_codec + ipc/json_messages, as UmaClient uses them); HTTP responses are read with
// httpkit's ResponseStream. Unlike UmaClient, every read says which of data, end of stream,
// timeout or socket error it met: the soak tells an expected close from a reset or a stall. Reads
// can be paced (small reads with a pause between them): the slow reader under test.
//
// Thread-safety: none; each object belongs to one client thread. Ownership: Socket owns its fd
// (closed in the destructor); a reader borrows its Socket, which must outlive it.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <random>
#include <string>
#include <string_view>

#include "httpkit/http_client.h"
#include "ipc/frame_codec.h"
#include "ipc/json_messages.h"
#include "net/blocking_socket.h"
#include "tools/soak/soak.h"

namespace uma::soak {

// The blocking socket and HTTP reader every tool shares (net/blocking_socket.h,
// httpkit/http_client.h), under the names the soak's actions use.
using uma::describe;
using uma::Pacer;
using uma::Pacing;
using uma::Read;
using Socket = uma::BlockingSocket;
using HttpReader = uma::ResponseStream;

// Framed JSON events from a Unix socket.
class EventReader {
 public:
  EventReader(Socket& s, std::size_t max_frame_bytes, Pacing pacing = {})
      : s_(s), rx_(max_frame_bytes), pacer_(pacing) {}
  // kData with *ev; kEof / kTimeout / kError (a frame that does not parse is kError).
  Read next(WireEvent* ev, Clock::time_point deadline, std::string* error);

 private:
  Socket& s_;
  FrameDecoder rx_;
  Pacer pacer_;
};

}  // namespace uma::soak
