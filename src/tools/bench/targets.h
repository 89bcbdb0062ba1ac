// Where uma-bench sends requests: umad over its framed JSON protocol (uds:PATH), or any
// OpenAI-compatible server over HTTP (/v1/completions with SSE streaming), so the same workload
// drives umad and llama-server. run() may be called from many threads at once: each request has
// a connection of its own (over HTTP, a kept-alive one from the target's pool with keep_alive).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "tools/bench/stats.h"

namespace uma::bench {

struct BenchRequest {
  std::string id;
  std::string prompt;
  std::int32_t max_tokens = 64;
  std::string klass = "interactive";
  std::string json_schema;  // umad (uds:) only: structured output, the cost of grammar sampling
  // Fixed output lengths, as benchmark clients ask for them (vLLM's fields, which umad, vLLM and
  // llama-server all take): never end before max_tokens / min_tokens.
  bool ignore_eos = false;
  std::int32_t min_tokens = 0;
};

class Target {
 public:
  virtual ~Target() = default;
  virtual RequestRecord run(const BenchRequest& request) = 0;
  virtual std::string describe() const = 0;
};

// "uds:/tmp/uma.sock" or "http://127.0.0.1:8080"; nullptr with *error set when unparseable.
std::unique_ptr<Target> make_target(const std::string& spec, std::string* error, bool keep_alive = false);

}  // namespace uma::bench
