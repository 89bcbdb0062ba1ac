// umad with several models (--models-dir, or --model more than once): one HTTP port in front of a
// umad per model (agent/model_front.h over agent/model_host.h, the pieces uma-agent is made of, with
// the user's files in place of the model store). Each model's umad runs with this umad's own
// flags (threads, context, sessions, GPU layers, API key, ...), loads on its model's first request
// and goes after --keep-alive idle, or for room under --max-models / --models-mb, least recently
// used first. Its logs and sockets are in a private directory removed at exit.
#pragma once

#include "daemon/config.h"

namespace uma {

// Runs until SIGINT/SIGTERM; the process's exit code. `argv`: umad's own, handed on to the
// models' umads less the flags that are the router's.
int run_model_router(const DaemonConfig& cfg, int argc, char** argv);

// The models' umads' arguments: `argv` (less argv[0]) without the router's own flags and values
// (--model/-m, --models-dir, --max-models, --models-mb, --keep-alive, --http, --socket/-s, --alias,
// --status-fd; as "--flag value" or "--flag=value"). Their UMA_* twins are unset before any starts.
std::vector<std::string> model_umad_args(int argc, char** argv);

}  // namespace uma
