// Standby: a umad that uma-agent starts before it knows which model it will serve, so a cold
// model's start is its load, not a process start and a GPU context's creation.
//
// Started as `umad --standby-fd N --status-fd S` (exactly so), it initialises llama.cpp's backends
// and a context on every GPU, writes {"event":"standby"} on S and waits on N (a Unix socket) for
// the agent's messages (agent/handover.h). A pin set pins the DRAM tier's images it names
// (runtime/host_pins.h) and is answered {"event":"pinned","images":K}. At the handover its log
// becomes stdout and stderr, the image (if any) descriptor 3, as a freshly spawned umad's would
// be, and the command line handed over is the one it runs from then on. The socket closed without a handover: the standby is not needed.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace uma {

// True when argv asks for a standby (argv[1] is --standby-fd).
bool is_standby(int argc, char** argv);

// The standby's wait. On success *args is the command line to parse (argv[0] first), or empty when
// the standby is not needed (exit 0). Call first thing in main, before any other thread exists.
Status await_handover(int argc, char** argv, std::vector<std::string>* args);

}  // namespace uma
