// Tier: where a model's bytes are in an agent's model store (store/tier_store.h), fastest first,
// and the words every JSON, log and metric names it by (an agent's state in Redis among them).
#pragma once

#include <cstdint>
#include <string_view>

#include "common/enum_names.h"

namespace uma::store {

enum class Tier : std::uint8_t { kDram = 0, kNvme = 1, kRemote = 2, kNone = 3 };
inline constexpr EnumName<Tier> kTierNames[] = {
    {"dram", Tier::kDram}, {"nvme", Tier::kNvme}, {"remote", Tier::kRemote}, {"none", Tier::kNone}};

inline std::string_view tier_name(Tier t) { return enum_name(kTierNames, t); }

}  // namespace uma::store
