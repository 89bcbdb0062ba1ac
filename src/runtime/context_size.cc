#include "runtime/context_size.h"

#include <ggml-backend.h>
#include <llama.h>

#include <algorithm>
#include <fstream>
#include <string>

namespace uma {

namespace {
std::string mib(std::int64_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }
}  // namespace

ContextChoice choose_context(std::int32_t n_ctx_train, std::int64_t kv_bytes_per_token, std::int64_t kv_budget_bytes) {
  const std::int32_t trained = n_ctx_train > 0 ? n_ctx_train : kFallbackContext;
  const std::string said = n_ctx_train > 0 ? "the model's trained context" : "the model names no trained context";
  if (kv_bytes_per_token <= 0 || kv_budget_bytes < 0) return {trained, said};
  const std::int64_t fits = kv_budget_bytes / kv_bytes_per_token;
  if (fits >= trained) return {trained, said};
  const auto largest = static_cast<std::int32_t>(std::max<std::int64_t>(kContextStep, fits / kContextStep * kContextStep));
  return {largest, "the largest that fits: the trained " + std::to_string(trained) + " needs " +
                       mib(kv_bytes_per_token * trained) + " of KV, " + mib(kv_budget_bytes) + " is the budget"};
}

std::int64_t kv_bytes_per_token(const llama_model* model) {
  const std::int64_t n_head = std::max(1, llama_model_n_head(model));
  const std::int64_t head_dim = llama_model_n_embd(model) / n_head;
  return 2 * static_cast<std::int64_t>(llama_model_n_layer(model)) * llama_model_n_head_kv(model) * head_dim * 2;
}

std::int64_t kv_budget_bytes(bool layers_on_gpu) {
  if (layers_on_gpu) {
    std::int64_t least = -1;
    for (std::size_t i = 0; i < ggml_backend_dev_count(); ++i) {
      ggml_backend_dev_t dev = ggml_backend_dev_get(i);
      if (ggml_backend_dev_type(dev) != GGML_BACKEND_DEVICE_TYPE_GPU) continue;
      std::size_t free = 0, total = 0;
      ggml_backend_dev_memory(dev, &free, &total);
      least = least < 0 ? static_cast<std::int64_t>(free) : std::min<std::int64_t>(least, static_cast<std::int64_t>(free));
    }
    if (least >= 0) return std::max<std::int64_t>(0, least * 85 / 100 - (std::int64_t{512} << 20));
  }
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  std::int64_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024 / 2;
  }
  return -1;
}

FlashAttention choose_flash_attention(FlashAttention asked, bool cpu_only, bool per_seq) {
  if (asked == FlashAttention::kAuto && cpu_only && !per_seq) return FlashAttention::kOff;
  return asked;
}

}  // namespace uma
