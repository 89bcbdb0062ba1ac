#include "gateway/fan_out.h"

#include <algorithm>
#include <cmath>

namespace uma::gateway {

double FanOut::decayed(const Rate& r, TimePoint now) const {
  const double dt = std::chrono::duration<double>(now - r.at).count();
  const double half = std::chrono::duration<double>(options_.half_life).count();
  return dt <= 0 ? r.weight : r.weight * std::exp2(-dt / half);
}

void FanOut::arrived(const std::string& model, TimePoint now) {
  if (!enabled()) return;
  Rate& r = rates_[model];
  r.weight = decayed(r, now) + 1.0;
  r.at = now;
}

// Arrivals decayed with half-life h sum to rate * h / ln 2 in the steady state.
double FanOut::rate(const std::string& model, TimePoint now) const {
  const auto it = rates_.find(model);
  if (it == rates_.end()) return 0;
  return decayed(it->second, now) * std::log(2.0) / std::chrono::duration<double>(options_.half_life).count();
}

std::vector<FanOut::Prefetch> FanOut::due(const std::vector<cluster::LoaderState>& loaders, TimePoint now) {
  std::vector<Prefetch> out;
  if (!enabled()) return out;
  std::erase_if(asked_, [&](const auto& e) { return now - e.second >= options_.every; });
  for (auto it = rates_.begin(); it != rates_.end();) {
    const double r = rate(it->first, now);
    if (r < 1e-3) {  // forgotten once quiet
      it = rates_.erase(it);
      continue;
    }
    const std::string& model = it->first;
    ++it;
    if (r < options_.min_rps) continue;
    std::int32_t holding = 0;
    std::vector<const cluster::LoaderState*> lacking;
    for (const cluster::LoaderState& l : loaders) {
      if (l.model(model) != nullptr || asked_.contains({model, l.id})) {
        ++holding;  // held, loading, or asked for already
      } else {
        lacking.push_back(&l);
      }
    }
    std::sort(lacking.begin(), lacking.end(), [](const cluster::LoaderState* a, const cluster::LoaderState* b) {
      return a->remote_bytes_s != b->remote_bytes_s ? a->remote_bytes_s > b->remote_bytes_s : a->id < b->id;
    });
    for (const cluster::LoaderState* l : lacking) {
      if (holding >= options_.copies) break;
      out.push_back({model, l->id});
      asked_[{model, l->id}] = now;
      ++holding;
    }
  }
  return out;
}

}  // namespace uma::gateway
