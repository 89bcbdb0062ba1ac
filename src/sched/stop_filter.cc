#include "sched/stop_filter.h"

#include <algorithm>

namespace uma {

StopFilter::StopFilter(std::vector<std::string> stops) : stops_(std::move(stops)) {
  std::erase_if(stops_, [](const std::string& s) { return s.empty(); });
}

std::string StopFilter::push(std::string_view text, bool* matched) {
  *matched = false;
  if (stops_.empty()) return std::string(text);
  held_.append(text);
  // Earliest complete stop string wins.
  std::size_t cut = std::string::npos;
  for (const std::string& s : stops_) {
    if (const std::size_t at = held_.find(s); at < cut) {
      cut = at;
      matched_ = s;
    }
  }
  if (cut != std::string::npos) {
    *matched = true;
    std::string out = held_.substr(0, cut);
    held_.clear();
    return out;
  }
  // Keep the longest suffix that is a proper prefix of some stop string.
  std::size_t keep = 0;
  for (const std::string& s : stops_) {
    for (std::size_t k = std::min(s.size() - 1, held_.size()); k > keep; --k) {
      if (std::string_view(held_).substr(held_.size() - k) == std::string_view(s).substr(0, k)) {
        keep = k;
        break;
      }
    }
  }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string StopFilter::flush() {
  std::string out;
  out.swap(held_);
  return out;
}

}  // namespace uma
