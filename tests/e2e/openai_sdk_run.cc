#include "e2e/openai_sdk_run.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <utility>
#include <vector>

#include "e2e/daemon_harness.h"
#include "e2e/oracle.h"
#include "llama.h"

namespace uma::test {

namespace {

// The expectations file both SDK tests read; "" with *out saying why when it cannot be made.
std::string expectations(std::string* out) {
  const int n = 12;
  const std::string prompt = "hello world";
  nlohmann::json exp;
  exp["prompt"] = prompt;
  exp["n"] = n;
  exp["prompt_tokens"] = oracle().tokenize(prompt).size();
  exp["completion"] = oracle().expected_text(prompt, n);
  // A stop string: a later piece of printable ASCII that first occurs where it is generated.
  const std::vector<std::string> pieces = oracle().expected_pieces(prompt, n);
  const std::string full = exp["completion"];
  std::size_t at = 0;
  for (int k = 0; k < n - 1; ++k) {
    const std::string& p = pieces[static_cast<size_t>(k)];
    const bool ascii = !p.empty() && std::all_of(p.begin(), p.end(), [](char ch) { return ch > ' ' && ch < 127; });
    if (k >= 3 && ascii && full.find(p) == at) {
      exp["stop"] = p;
      exp["before_stop"] = full.substr(0, at);
      break;
    }
    at += p.size();
  }
  if (!exp.contains("stop")) {
    *out = "no usable stop string in " + full;
    return {};
  }
  // The chat prompt as llama.cpp's chatml template renders it, then the oracle's continuation.
  const std::vector<std::pair<std::string, std::string>> msgs = {{"system", "be brief"}, {"user", "hello world"}};
  std::vector<llama_chat_message> cm;
  for (const auto& [r, c] : msgs) cm.push_back({r.c_str(), c.c_str()});
  std::string rendered(4096, '\0');
  const int len = llama_chat_apply_template("chatml", cm.data(), cm.size(), true, rendered.data(), 4096);
  if (len <= 0) {
    *out = "chatml did not render";
    return {};
  }
  rendered.resize(static_cast<size_t>(len));
  exp["messages"] = nlohmann::json::array();
  for (const auto& [r, c] : msgs) exp["messages"].push_back({{"role", r}, {"content", c}});
  exp["chat"] = oracle().expected_text(rendered, n);
  exp["chat_prompt_tokens"] = oracle().tokenize(rendered).size();
  // A stop string in the chat reply (its pieces are control bytes: any that first occurs where it is generated).
  const std::vector<std::string> chat_pieces = oracle().expected_pieces(rendered, n);
  const std::string chat_full = exp["chat"];
  at = 0;
  for (int k = 0; k < n - 1; ++k) {
    const std::string& p = chat_pieces[static_cast<size_t>(k)];
    if (k >= 3 && !p.empty() && chat_full.find(p) == at) {
      exp["chat_stop"] = p;
      exp["chat_before_stop"] = chat_full.substr(0, at);
      break;
    }
    at += p.size();
  }
  if (!exp.contains("chat_stop")) {
    *out = "no usable stop string in the chat reply";
    return {};
  }
  const std::string exp_path = temp_dir() + "/openai-expectations.json";
  std::ofstream(exp_path) << exp.dump();
  return exp_path;
}

}  // namespace

int run_openai_sdk_test(const std::string& base_url, std::string* out) {
  const std::string exp_path = expectations(out);
  if (exp_path.empty()) return -1;
  return run_command({"/usr/bin/env", "NODE_PATH=" UMA_NODE_MODULES, "node", UMA_SOURCE_DIR "/tests/http/openai_sdk_test.js",
                      base_url, exp_path}, out, 120);
}

int run_anthropic_responses_sdk_test(const std::string& base_url, std::string* out, bool through_gateway) {
  const std::string exp_path = expectations(out);
  if (exp_path.empty()) return -1;
  return run_command({"/usr/bin/env", "NODE_PATH=" UMA_NODE_MODULES, "node",
                      UMA_SOURCE_DIR "/tests/http/anthropic_responses_sdk_test.js", base_url, exp_path,
                      through_gateway ? "gateway" : "direct"}, out, 120);
}

}  // namespace uma::test
