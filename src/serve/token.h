// A token id as llama.cpp numbers a model's vocabulary: the one type every layer passes tokens as.
#pragma once

#include <cstdint>

namespace uma {

using Token = std::int32_t;

}  // namespace uma
