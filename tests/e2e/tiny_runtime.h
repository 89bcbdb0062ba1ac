// The random tiny model in a LlamaRuntime, for tests of the runtime itself (not the daemon).
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "runtime/llama_runtime.h"

namespace uma::test {

// Opens tiny-f16.gguf with 4 sequences on one thread (a pool of two stalls at every barrier while
// a core is taken); `tweak` adjusts the rest of the config.
template <typename Tweak>
std::unique_ptr<LlamaRuntime> open_tiny_runtime(Tweak tweak) {
  init_llama_backend();
  RuntimeConfig cfg;
  cfg.model_path = std::string(UMA_MODELS_DIR) + "/tiny-f16.gguf";
  cfg.n_ctx = 512;
  cfg.n_batch = 128;
  cfg.n_seq_max = 4;
  cfg.n_threads = 1;
  tweak(cfg);
  Status st;
  auto rt = LlamaRuntime::open(cfg, &st);
  EXPECT_TRUE(rt != nullptr) << st.to_string();
  return rt;
}

// A prompt of n tokens for the tiny model (32k vocabulary), different for each salt.
inline std::vector<Token> tiny_prompt(int n, int salt) {
  std::vector<Token> t;
  for (int i = 0; i < n; ++i) t.push_back(500 + (i * 53 + salt * 211) % 20000);
  return t;
}

}  // namespace uma::test
