#include "sched/logprobs.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace uma {

LogprobEntry logprob_entry(std::span<const float> row, std::int32_t chosen, std::int32_t top_n) {
  LogprobEntry e;
  e.chosen.token = chosen;
  if (row.empty() || chosen < 0 || static_cast<std::size_t>(chosen) >= row.size()) return e;
  float max = -std::numeric_limits<float>::infinity();
  for (float x : row) max = std::max(max, x);
  double sum = 0.0;
  for (float x : row) sum += std::exp(static_cast<double>(x - max));
  const double log_z = static_cast<double>(max) + std::log(sum);
  const auto lp = [&](std::int32_t t) { return static_cast<float>(static_cast<double>(row[static_cast<std::size_t>(t)]) - log_z); };
  e.chosen.logprob = lp(chosen);
  const auto n = static_cast<std::size_t>(std::clamp<std::int32_t>(top_n, 0, static_cast<std::int32_t>(row.size())));
  if (n == 0) return e;
  // The n largest in one pass: a small heap, the worst kept on top.
  const auto better = [&](std::int32_t a, std::int32_t b) {
    const float la = row[static_cast<std::size_t>(a)], lb = row[static_cast<std::size_t>(b)];
    return la > lb || (la == lb && a < b);
  };
  std::vector<std::int32_t> heap;
  heap.reserve(n + 1);
  for (std::int32_t t = 0; t < static_cast<std::int32_t>(row.size()); ++t) {
    if (heap.size() < n) {
      heap.push_back(t);
      std::push_heap(heap.begin(), heap.end(), better);
    } else if (better(t, heap.front())) {
      std::pop_heap(heap.begin(), heap.end(), better);
      heap.back() = t;
      std::push_heap(heap.begin(), heap.end(), better);
    }
  }
  std::sort(heap.begin(), heap.end(), better);
  for (std::int32_t t : heap) e.top.push_back(TokenLogprob{t, {}, lp(t)});
  return e;
}

}  // namespace uma
