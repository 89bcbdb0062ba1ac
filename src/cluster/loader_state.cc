#include "cluster/loader_state.h"

#include <nlohmann/json.hpp>

#include <algorithm>

#include "common/json_fields.h"
#include "common/json_text.h"

namespace uma::cluster {

using json = nlohmann::json;

std::string encode_loader_state(const LoaderState& s) {
  nlohmann::ordered_json j;
  j["id"] = s.id;
  j["address"] = s.address;
  j["ts_ms"] = s.ts_ms;
  j["models"] = nlohmann::ordered_json::array();
  for (const LoaderModel& m : s.models) {
    j["models"].push_back({{"name", m.name}, {"state", model_state_name(m.state)}, {"bytes", m.bytes}, {"in_use", m.in_use}});
  }
  j["budget_bytes"] = s.budget_bytes;
  j["held_bytes"] = s.held_bytes;
  j["idle_bytes"] = s.idle_bytes;
  j["dram_bytes_s"] = s.dram_bytes_s;
  j["nvme_bytes_s"] = s.nvme_bytes_s;
  j["remote_bytes_s"] = s.remote_bytes_s;
  j["start_s"] = s.start_s;
  j["stop_s"] = s.stop_s;
  j["queue_bytes"] = s.queue_bytes;
  return to_json_text(j);
}

Status decode_loader_state(std::string_view text, LoaderState* out) {
  const json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return Status(ErrorCode::kInvalidJson, "loader state: not a JSON object");
  const JsonFields<json> in(j, "loader state");
  LoaderState s;
  Status st;
  if (!(st = in.string("id", &s.id)).ok() || !(st = in.string("address", &s.address)).ok()) return st;
  if (!(st = in.number("ts_ms", &s.ts_ms)).ok() || !(st = in.number("budget_bytes", &s.budget_bytes)).ok() ||
      !(st = in.number("held_bytes", &s.held_bytes)).ok() || !(st = in.number("idle_bytes", &s.idle_bytes)).ok() ||
      !(st = in.number("dram_bytes_s", &s.dram_bytes_s)).ok() || !(st = in.number("nvme_bytes_s", &s.nvme_bytes_s)).ok() ||
      !(st = in.number("remote_bytes_s", &s.remote_bytes_s)).ok() || !(st = in.number("start_s", &s.start_s)).ok() ||
      !(st = in.number("stop_s", &s.stop_s)).ok() || !(st = in.number("queue_bytes", &s.queue_bytes)).ok()) {
    return st;
  }
  const auto models = j.find("models");
  if (models == j.end() || !models->is_array()) return in.bad("models");
  for (const json& m : *models) {
    const JsonFields<json> model(m, "loader state");
    LoaderModel lm;
    std::string state;
    if (!m.is_object() || !model.string("name", &lm.name).ok() || !model.string("state", &state).ok() ||
        !model.number("bytes", &lm.bytes).ok() || !parse_enum(kModelStateNames, state, &lm.state)) {
      return in.bad("models");
    }
    if (const auto u = m.find("in_use"); u != m.end() && !u->is_null()) {
      if (!u->is_boolean()) return in.bad("models");
      lm.in_use = u->get<bool>();
    }
    s.models.push_back(std::move(lm));
  }
  *out = std::move(s);
  return {};
}

double predicted_load_s(const LoaderState& l, const std::string& model, std::uint64_t bytes, const LoadPriors& priors,
                        LoadTerms* terms) {
  const LoaderModel* m = l.model(model);
  const ModelState state = m ? m->state : ModelState::kRemote;
  if (loading_or_loaded(state)) return 0.0;
  if (l.budget_bytes > 0 && l.held_bytes - std::min(l.idle_bytes, l.held_bytes) + bytes > l.budget_bytes) return -1.0;
  const auto rate = [](double measured, double prior) { return measured > 0 ? measured : prior; };
  const double from = state == ModelState::kDram   ? rate(l.dram_bytes_s, priors.dram_bytes_s)
                      : state == ModelState::kNvme ? rate(l.nvme_bytes_s, priors.nvme_bytes_s)
                                                   : rate(l.remote_bytes_s, priors.remote_bytes_s);
  // The queue moves at the disk's pace in the common case (prefetches, other loads).
  const bool make_room = l.budget_bytes > 0 && l.held_bytes + bytes > l.budget_bytes;
  // Other models starting there are not counted: charging each a whole start (as if starts ran one
  // after another) over-predicted overlapping loads by 0.7-2.8x (docs/BENCHMARKS.md "Serverless").
  const LoadTerms t{static_cast<double>(bytes) / from, static_cast<double>(l.queue_bytes) / rate(l.nvme_bytes_s, priors.nvme_bytes_s),
                    rate(l.start_s, priors.start_s), make_room ? rate(l.stop_s, priors.stop_s) : 0.0};
  if (terms) *terms = t;
  return t.fill_s + t.queue_s + t.start_s + t.stop_s;
}

int choose_loader(const std::vector<LoaderState>& loaders, const std::string& model, std::uint64_t bytes, const LoadPriors& priors) {
  int best = -1;
  double best_s = 0;
  for (std::size_t i = 0; i < loaders.size(); ++i) {
    const double s = predicted_load_s(loaders[i], model, bytes, priors);
    if (s < 0) continue;
    const bool better = best < 0 || s < best_s ||
                        (s == best_s && loaders[i].held_bytes < loaders[static_cast<std::size_t>(best)].held_bytes);
    if (better) {
      best = static_cast<int>(i);
      best_s = s;
    }
  }
  return best;
}

Migration choose_migration(const std::vector<LoaderState>& loaders, const std::string& model, std::uint64_t bytes,
                           const std::function<bool(const std::string& model, const std::string& loader)>& served_elsewhere) {
  Migration best;
  std::uint64_t best_moved = 0;
  for (std::size_t i = 0; i < loaders.size(); ++i) {
    const LoaderState& l = loaders[i];
    const LoaderModel* there = l.model(model);
    if (l.budget_bytes == 0 || bytes > l.budget_bytes || (there != nullptr && there->state != ModelState::kDram && there->state != ModelState::kNvme)) {
      continue;  // no budget to make room in, never room, or it is loading or loaded there already
    }
    // Room it has (idle models go on their own), then the models in use that can move, smallest
    // first, until the model fits.
    std::uint64_t busy = l.held_bytes - std::min(l.idle_bytes, l.held_bytes);
    std::vector<const LoaderModel*> movable;
    for (const LoaderModel& m : l.models) {
      if (m.in_use && m.state == ModelState::kLoaded && served_elsewhere(m.name, l.id)) movable.push_back(&m);
    }
    std::sort(movable.begin(), movable.end(), [](const LoaderModel* a, const LoaderModel* b) { return a->bytes < b->bytes; });
    Migration m;
    m.loader = static_cast<int>(i);
    std::uint64_t moved = 0;
    for (const LoaderModel* x : movable) {
      if (busy + bytes <= l.budget_bytes) break;
      m.models.push_back(x->name);
      busy -= std::min(busy, x->bytes);
      moved += x->bytes;
    }
    if (busy + bytes > l.budget_bytes || m.models.empty()) continue;
    if (best.loader < 0 || moved < best_moved) {
      best = std::move(m);
      best_moved = moved;
    }
  }
  return best;
}

std::vector<std::string> migration_for_queued_load(
    const LoaderState& l, const std::string& model, std::uint64_t bytes,
    const std::function<bool(const std::string& model, const std::string& loader)>& served_elsewhere) {
  const LoaderModel* queued = l.model(model);
  if (queued == nullptr || queued->state != ModelState::kQueued) return {};
  // A queued load holds no budget yet (held_bytes leaves it out): the room it needs is the
  // question choose_migration answers for a model on the loader's disk.
  LoaderState as_if_cold = l;
  std::erase_if(as_if_cold.models, [&](const LoaderModel& m) { return m.name == model; });
  return choose_migration({as_if_cold}, model, bytes, served_elsewhere).models;
}

}  // namespace uma::cluster
