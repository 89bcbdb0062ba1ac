// LoaderState: one uma-agent's soft state as a loader of models (docs/AGENT.md), in Redis as
// `uma:loader:{id}` (JSON, PX ttl) with the id in `uma:loaders`, beside the `uma:agent:{id}` keys
// of the umads it runs (which serve, and are routed to, as any agent). Gateways read it to decide
// where a model that no agent serves gets loaded: choose_loader(), a pure function.
// Decoding type-checks every field (anyone on the network may write to Redis).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "cluster/model_state.h"
#include "common/status.h"

namespace uma::cluster {

inline constexpr const char* kLoadersSet = "uma:loaders";
inline std::string loader_key(const std::string& id) { return "uma:loader:" + id; }
// The lock a gateway holds while it has a model loaded (SET NX PX, renewed while loading).
inline std::string load_lock_key(const std::string& model) { return "uma:load-lock:" + model; }

struct LoaderModel {
  std::string name;
  ModelState state = ModelState::kRemote;  // never kRemote in a loader's list: what it lacks is remote for it
  std::uint64_t bytes = 0;  // loaded (and loading) models: what they hold of the budget
  bool in_use = false;      // loaded and serving a request now
};

struct LoaderState {
  std::string id;
  std::string address;  // the management API's base URL (POST /load)
  std::int64_t ts_ms = 0;
  std::vector<LoaderModel> models;  // those it holds in a tier or has loaded; any other is remote for it
  std::uint64_t budget_bytes = 0;   // 0: no limit
  std::uint64_t held_bytes = 0;     // loaded (and loading) models' bytes
  std::uint64_t idle_bytes = 0;     // of those, idle loaded models' (room it can make)
  double dram_bytes_s = 0, nvme_bytes_s = 0, remote_bytes_s = 0;  // fills, measured; 0: not yet
  double start_s = 0;               // a model server's start (exec to serving), measured; 0: not yet
  double stop_s = 0;                // an idle model's unload (room for a load), measured; 0: not yet
  std::uint64_t queue_bytes = 0;    // what its store still has to move

  const LoaderModel* model(std::string_view name) const {
    for (const LoaderModel& m : models) {
      if (m.name == name) return &m;
    }
    return nullptr;
  }
};

std::string encode_loader_state(const LoaderState& s);
Status decode_loader_state(std::string_view json_text, LoaderState* out);

// Rates assumed where a loader has measured none yet.
struct LoadPriors {
  double dram_bytes_s = 4e9;
  double nvme_bytes_s = 1e9;
  double remote_bytes_s = 1e8;
  double start_s = 0.5;
  double stop_s = 0.2;
};

// The predicted seconds until `model` (of `bytes`) serves on `l`: its bytes from the fastest tier
// that holds them at that tier's measured rate, behind the store's queue, then a model server's
// start, after an idle model's unload where the budget needs its room; 0 when it is loading there
// already. Negative: it cannot be admitted there (its budget is held by models in use).
// `terms`, when given, gets the prediction's parts (for the gateway's log: which one was off).
struct LoadTerms {
  double fill_s = 0, queue_s = 0, start_s = 0, stop_s = 0;
};
double predicted_load_s(const LoaderState& l, const std::string& model, std::uint64_t bytes, const LoadPriors& priors,
                        LoadTerms* terms = nullptr);
// The loader with the lowest prediction (ties: the least held), or -1 when none can take it.
int choose_loader(const std::vector<LoaderState>& loaders, const std::string& model, std::uint64_t bytes,
                  const LoadPriors& priors = {});

// Live migration: when no loader has room for `model` because its budget is held by
// models in use, the loader where moving the fewest bytes of in-use models makes room, and those
// models, each of which `served_elsewhere(model, loader id)` says another agent serves (its streams
// can resume there: the gateway's token-exact resume, planned). A loaded model's agent id is the
// loader's id, "/", and the model (agent/model_host.h), which is how a gateway finds its streams.
// loader -1: none.
struct Migration {
  int loader = -1;
  std::vector<std::string> models;  // to move off it
};
Migration choose_migration(const std::vector<LoaderState>& loaders, const std::string& model, std::uint64_t bytes,
                           const std::function<bool(const std::string& model, const std::string& loader)>& served_elsewhere);
// A load of `model` already queued at `l` whose room models in use hold (it was chosen on a view a
// beat behind a stream that reached `l` since, loaders beating once a second; or another gateway's
// streams hold the room). The models to move off `l` (as choose_migration would), or none when it
// is not queued there, its room is coming (idle models leave on their own), or what holds it
// cannot resume elsewhere.
std::vector<std::string> migration_for_queued_load(
    const LoaderState& l, const std::string& model, std::uint64_t bytes,
    const std::function<bool(const std::string& model, const std::string& loader)>& served_elsewhere);
inline std::string loaded_model_agent_id(const std::string& loader, const std::string& model) { return loader + "/" + model; }

}  // namespace uma::cluster
