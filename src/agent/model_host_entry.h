// ModelHost's record of one model (model_host.h), shared by the files that implement the host:
// model_host.cc (loading, the state machine, the timers) and model_host_exit.cc (unloading and a
// child's exit). Owned by ModelHost; used on its I/O thread only.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "agent/model_host.h"

namespace uma::agent {

struct ModelHost::Entry {
  std::string id;
  ModelState state = ModelState::kQueued;
  ModelOrigin origin;
  std::uint64_t bytes = 0;
  std::string tier;  // where the bytes were when the load began
  store::Tier from = store::Tier::kNone;
  Clock::time_point fill_started{};
  Clock::time_point start_began{};
  bool start_overlapped = false;  // another model filled or started meanwhile (not a start alone)
  bool fill_overlapped = false;   // likewise for its fill
  bool took_standby = false;      // its umad was the standby
  std::shared_ptr<store::ModelImage> image;
  bool holds_image = false;  // the store's hold (acquire) not yet released
  std::unique_ptr<ModelProcess> process;
  std::uint64_t generation = 0;
  std::vector<LoadListener> waiters;
  std::vector<UnloadDone> unload_waiters;
  bool busy = false;
  bool unload_when_idle = false;
  bool reload = false;      // a load asked while it was unloading: load again after the exit
  bool forced = false;      // the unload was SIGTERM
  UnloadReason unload_reason = UnloadReason::kNone;
  std::int64_t keep_alive_ms = 0;
  Clock::time_point asked_at{};     // the load asked for
  Clock::time_point state_since{};
  Clock::time_point last_used{};
  Clock::time_point loaded_at{};
  std::uint16_t http_port = 0;
};

}  // namespace uma::agent
