// Choices about the llama context umad opens.
// - Its size when --n-ctx is not given (0): the model's trained context when its KV fits the
//   memory it would live in, else the largest that does, with the reason said in the start line.
//   choose_context() is pure (unit-tested on synthetic sizes); the two readers ask the model and
//   the machine.
// - Flash attention (choose_flash_attention, pure).
// - The modes a RuntimeConfig names (KV layout, flash attention, device sampling), with their words.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/enum_names.h"

struct llama_model;

namespace uma {

struct ContextChoice {
  std::int32_t n_ctx = 0;
  std::string why;  // for the start line
};

inline constexpr std::int32_t kContextStep = 256;   // a chosen context is a multiple of this
inline constexpr std::int32_t kFallbackContext = 4096;  // a model that does not say its trained context

// n_ctx_train <= 0: the model does not say (kFallbackContext). The result is at least kContextStep.
ContextChoice choose_context(std::int32_t n_ctx_train, std::int64_t kv_bytes_per_token, std::int64_t kv_budget_bytes);

// K and V of one token in every layer, at f16 (llama.cpp's default cache type).
std::int64_t kv_bytes_per_token(const llama_model* model);
// What KV may take: 85% of the least free memory of the GPUs that hold layers, less 512 MiB for
// compute buffers; on the CPU half of MemAvailable. -1 when it cannot be told.
std::int64_t kv_budget_bytes(bool layers_on_gpu);

// --flash-attn `asked` (on, off, auto). auto is llama.cpp's own choice, except on a CPU-only
// build with one KV pool: there every row attends over the whole pool, and llama.cpp's CPU kernel
// is several times slower for a serving tick's small batches over a deep KV, so it is off. With
// per-sequence KV a row attends over its own cells and flash attention wins on the CPU too
// (docs/BENCHMARKS.md).
enum class FlashAttention : std::uint8_t { kOn, kOff, kAuto };
inline constexpr EnumName<FlashAttention> kFlashAttentionNames[] = {
    {"auto", FlashAttention::kAuto}, {"on", FlashAttention::kOn}, {"off", FlashAttention::kOff}};
FlashAttention choose_flash_attention(FlashAttention asked, bool cpu_only, bool per_seq);

// Unified: one KV pool every sequence draws from; per-seq: a stream of cells per sequence; auto:
// per-seq with more than one sequence (RuntimeConfig::kv_layout says what each costs).
enum class KvLayout : std::uint8_t { kAuto, kUnified, kPerSeq };
inline constexpr EnumName<KvLayout> kKvLayoutNames[] = {
    {"auto", KvLayout::kAuto}, {"unified", KvLayout::kUnified}, {"per-seq", KvLayout::kPerSeq}};
constexpr bool kv_per_sequence(KvLayout layout, std::int32_t n_seq_max) {
  return layout == KvLayout::kPerSeq || (layout == KvLayout::kAuto && n_seq_max > 1);
}

// Greedy requests sampled in the decode's graph: on, off, or auto (where the output layer is on a GPU).
enum class DeviceSampling : std::uint8_t { kAuto, kOn, kOff };
inline constexpr EnumName<DeviceSampling> kDeviceSamplingNames[] = {
    {"auto", DeviceSampling::kAuto}, {"on", DeviceSampling::kOn}, {"off", DeviceSampling::kOff}};

}  // namespace uma
