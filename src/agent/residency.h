// Residency: which models an agent keeps loaded, as pure functions over a snapshot (no clock, no
// processes), so the policy is tested on synthetic state (agent/residency_test.cc), as the
// scheduler's policy is.
//
// A model counts against the budget from the moment its load is admitted until its process has
// exited (an unload asked for still holds its memory). Two reasons unload a model, and neither
// ever picks one with a request in flight or one still loading:
//   - keep_alive: idle for its keep_alive (Ollama's; per load, else the agent's default; < 0:
//     never);
//   - room: a load that does not fit the byte budget (or the model count) takes the least
//     recently used idle models' room, oldest first, only as many as it needs; when even every
//     idle model would not make room (the rest are in use), the load cannot be admitted now.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace uma::agent {

struct Resident {
  std::string id;
  std::uint64_t bytes = 0;   // what it holds of the budget
  bool idle = false;         // loaded, no request in flight, not already being unloaded
  std::int64_t last_used_ms = 0;  // when its last request ended (or it loaded)
  std::int64_t keep_alive_ms = -1;  // < 0: never unloaded for idleness
};

struct Budget {
  std::uint64_t bytes = 0;  // 0: no byte limit
  std::int32_t models = 0;  // 0: no count limit
};

// Idle models whose keep_alive has run out at `now_ms`.
std::vector<std::string> expired(const std::vector<Resident>& residents, std::int64_t now_ms);

struct Room {
  bool fits = false;                // true: admitted once `unload` have exited (at once if empty)
  std::vector<std::string> unload;  // idle models to unload for it, least recently used first
  std::uint64_t held_in_use = 0;    // when it does not fit: the bytes held by models it may not take
};
// Room for a model of `need` bytes beside `residents` (every model holding budget).
Room make_room(const std::vector<Resident>& residents, std::uint64_t need, const Budget& budget);

}  // namespace uma::agent
