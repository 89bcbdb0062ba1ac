// ModelState: where one model stands on a machine of the cluster, one enum for the agent that
// loads it (agent/model_host.h moves it through queued .. unloading), the loader and agent states
// gateways read from Redis, and every JSON that names it, by the words below.
#pragma once

#include <cstdint>
#include <iterator>

#include "common/enum_names.h"

namespace uma::cluster {

enum class ModelState : std::uint8_t {
  kRemote,     // nowhere here: its bytes come from the store's remote tier
  kNvme,       // held in the NVMe tier, not loaded
  kDram,       // held in host memory, not loaded
  kQueued,     // a load waits for room
  kFilling,    // its bytes are being brought to a fast tier for the load
  kStarting,   // its model server is starting
  kLoaded,     // served
  kUnloading,  // its model server is stopping
};
inline constexpr EnumName<ModelState> kModelStateNames[] = {
    {"remote", ModelState::kRemote},   {"nvme", ModelState::kNvme},         {"dram", ModelState::kDram},
    {"queued", ModelState::kQueued},   {"filling", ModelState::kFilling},   {"starting", ModelState::kStarting},
    {"loaded", ModelState::kLoaded},   {"unloading", ModelState::kUnloading}};
inline constexpr std::size_t kModelStates = std::size(kModelStateNames);

inline const char* model_state_name(ModelState s) { return enum_name(kModelStateNames, s).data(); }
// A load under way there (no other load of it is needed).
constexpr bool loading_or_loaded(ModelState s) {
  return s == ModelState::kQueued || s == ModelState::kFilling || s == ModelState::kStarting || s == ModelState::kLoaded;
}

}  // namespace uma::cluster
