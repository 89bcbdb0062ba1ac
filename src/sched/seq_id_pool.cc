#include "sched/seq_id_pool.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace uma {

namespace {
constexpr std::uint8_t kNotOurs = 0, kFree = 1, kTaken = 2;

[[noreturn]] void die(const char* what) {
  spdlog::critical("sequence ids: {}", what);
  std::fprintf(stderr, "sequence ids: %s\n", what);  // also when logging is off
  std::abort();
}
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

std::int32_t SeqIdPool::lowest() const {
  if (free_.empty()) die("lowest() of an empty pool");
  return free_.back();
}

std::int32_t SeqIdPool::take() {
  if (free_.empty()) die("take() from an empty pool");
  const std::int32_t id = free_.back();
  free_.pop_back();
  state_[static_cast<std::size_t>(id)] = kTaken;
  return id;
}

bool SeqIdPool::is_free(std::int32_t id) const { return owns(id) && state_[static_cast<std::size_t>(id)] == kFree; }

void SeqIdPool::take(std::int32_t id) {
  if (!is_free(id)) die("take(id) of an id that is not free in the pool");
  free_.erase(std::find(free_.begin(), free_.end(), id));
  state_[static_cast<std::size_t>(id)] = kTaken;
}

std::int32_t SeqIdPool::highest() const {
  if (free_.empty()) die("highest() of an empty pool");
  return free_.front();
}

std::int32_t SeqIdPool::take_highest() {
  if (free_.empty()) die("take_highest() from an empty pool");
  const std::int32_t id = free_.front();
  free_.erase(free_.begin());
  state_[static_cast<std::size_t>(id)] = kTaken;
  return id;
}

void SeqIdPool::give_back(std::int32_t id) {
  if (!owns(id) || state_[static_cast<std::size_t>(id)] != kTaken) {
    die(owns(id) ? "give_back() of an id the pool holds free already" : "give_back() of an id the pool does not own");
  }
  state_[static_cast<std::size_t>(id)] = kFree;
  auto it = free_.begin();
  while (it != free_.end() && *it > id) ++it;
  free_.insert(it, id);
}

}  // namespace uma
