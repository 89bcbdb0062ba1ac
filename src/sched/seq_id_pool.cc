#include "sched/seq_id_pool.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace uma {

namespace {
constexpr std::uint8_t kNotOurs = 0, kFree = 1, kTaken = 2;
}  // namespace

void SeqIdPool::add_range(std::int32_t lo, std::int32_t hi) {
  if (hi > static_cast<std::int32_t>(state_.size())) state_.resize(static_cast<std::size_t>(hi), kNotOurs);
  for (std::int32_t id = lo; id < hi; ++id) {
    state_[static_cast<std::size_t>(id)] = kFree;
    free_.push_back(id);
  }
  std::sort(free_.begin(), free_.end(), [](std::int32_t a, std::int32_t b) { return a > b; });
}

bool SeqIdPool::owns(std::int32_t id) const {
  return id >= 0 && id < static_cast<std::int32_t>(state_.size()) && state_[static_cast<std::size_t>(id)] != kNotOurs;
}

std::int32_t SeqIdPool::take() {
  const std::int32_t id = free_.back();
  free_.pop_back();
  state_[static_cast<std::size_t>(id)] = kTaken;
  return id;
}

void SeqIdPool::give_back(std::int32_t id) {
  if (!owns(id) || state_[static_cast<std::size_t>(id)] != kTaken) {
    const char* why = owns(id) ? "holds it free already" : "does not own it";
    spdlog::critical("sequence id {} given back to a pool that {}", id, why);
    std::fprintf(stderr, "sequence id %d given back to a pool that %s\n", id, why);  // also when logging is off
    std::abort();
  }
  state_[static_cast<std::size_t>(id)] = kFree;
  auto it = free_.begin();
  while (it != free_.end() && *it > id) ++it;
  free_.insert(it, id);
}

}  // namespace uma
