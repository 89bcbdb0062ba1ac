#include "agent/residency.h"

#include <algorithm>

namespace uma::agent {

std::vector<std::string> expired(const std::vector<Resident>& residents, std::int64_t now_ms) {
  std::vector<std::string> out;
  for (const Resident& r : residents) {
    if (r.idle && r.keep_alive_ms >= 0 && now_ms - r.last_used_ms >= r.keep_alive_ms) out.push_back(r.id);
  }
  return out;
}

Room make_room(const std::vector<Resident>& residents, std::uint64_t need, const Budget& budget) {
  Room room;
  if (budget.bytes > 0 && need > budget.bytes) {
    for (const Resident& r : residents) room.held_in_use += r.idle ? 0 : r.bytes;
    return room;  // never fits, whatever is unloaded
  }
  std::uint64_t held = 0;
  for (const Resident& r : residents) held += r.bytes;
  std::int32_t count = static_cast<std::int32_t>(residents.size());
  const auto over = [&] {
    return (budget.bytes > 0 && held + need > budget.bytes) || (budget.models > 0 && count + 1 > budget.models);
  };
  std::vector<const Resident*> idle;
  for (const Resident& r : residents) {
    if (r.idle) idle.push_back(&r);
  }
  std::stable_sort(idle.begin(), idle.end(), [](const Resident* a, const Resident* b) { return a->last_used_ms < b->last_used_ms; });
  for (const Resident* r : idle) {
    if (!over()) break;
    room.unload.push_back(r->id);
    held -= r->bytes;
    --count;
  }
  room.fits = !over();
  if (!room.fits) {
    room.unload.clear();
    for (const Resident& r : residents) room.held_in_use += r.idle ? 0 : r.bytes;
  }
  return room;
}

}  // namespace uma::agent
