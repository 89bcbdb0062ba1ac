#include "e2e/openai_sdk_run.h"

#include <unistd.h>

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

// A stop string for a reply of these pieces: a later piece (from the 4th on; printable ASCII when
// `ascii`) that first occurs where it is generated; sets exp[stop_key] and the text before it.
bool find_stop(const std::vector<std::string>& pieces, const std::string& full, bool ascii, nlohmann::json* exp,
               const char* stop_key, const char* before_key) {
  std::size_t at = 0;
  for (std::size_t k = 0; k + 1 < pieces.size(); ++k) {
    const std::string& p = pieces[k];
    const bool usable = !p.empty() && (!ascii || std::all_of(p.begin(), p.end(), [](char ch) { return ch > ' ' && ch < 127; }));
    if (k >= 3 && usable && full.find(p) == at) {
      (*exp)[stop_key] = p;
      (*exp)[before_key] = full.substr(0, at);
      return true;
    }
    at += p.size();
  }
  return false;
}

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
  const std::string full = exp["completion"];
  if (!find_stop(oracle().expected_pieces(prompt, n), full, true, &exp, "stop", "before_stop")) {
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
  if (!find_stop(oracle().expected_pieces(rendered, n), exp["chat"].get<std::string>(), false, &exp, "chat_stop", "chat_before_stop")) {
    *out = "no usable stop string in the chat reply";
    return {};
  }
  const std::string exp_path = temp_dir() + "/openai-expectations.json";
  std::ofstream(exp_path) << exp.dump();
  return exp_path;
}

// A script of many requests, each bounded by its SDK's timeout (the hang guard): the run, by twice that.
constexpr int kSdkRunGuardSec = static_cast<int>(2 * kHangGuard.count());

}  // namespace

int run_openai_sdk_test(const std::string& base_url, std::string* out) {
  const std::string exp_path = expectations(out);
  if (exp_path.empty()) return -1;
  return run_command({"/usr/bin/env", "NODE_PATH=" UMA_NODE_MODULES, "node", UMA_SOURCE_DIR "/tests/http/openai_sdk_test.js",
                      base_url, exp_path}, out, kSdkRunGuardSec);
}

bool node_sdks_available() {
  std::string out;
  return run_command({"/bin/sh", "-c", "command -v node"}, &out) == 0 &&
         ::access(UMA_NODE_MODULES "/openai", R_OK) == 0 && ::access(UMA_NODE_MODULES "/@anthropic-ai/sdk", R_OK) == 0 &&
         ::access(UMA_NODE_MODULES "/ollama", R_OK) == 0;
}

int run_ollama_client_test(const std::string& base_url, const std::string& model, std::string* out, bool through_gateway) {
  const std::string exp_path = expectations(out);
  if (exp_path.empty()) return -1;
  return run_command({"/usr/bin/env", "NODE_PATH=" UMA_NODE_MODULES, "node", UMA_SOURCE_DIR "/tests/http/ollama_client_test.js",
                      base_url, exp_path, model, through_gateway ? "gateway" : "direct"}, out, kSdkRunGuardSec);
}

int run_ollama_tools_test(const std::string& base_url, const std::string& model, std::string* out) {
  return run_command({"/usr/bin/env", "NODE_PATH=" UMA_NODE_MODULES, "node", UMA_SOURCE_DIR "/tests/http/ollama_tools_test.js",
                      base_url, model}, out, kSdkRunGuardSec);
}

int run_vision_clients_test(const std::string& base_url, const std::string& model, int image_tokens, std::string* out) {
  return run_command({"/usr/bin/env", "NODE_PATH=" UMA_NODE_MODULES, "node", UMA_SOURCE_DIR "/tests/http/vision_clients_test.js",
                      base_url, model, std::to_string(image_tokens)}, out, kSdkRunGuardSec);
}

int run_anthropic_responses_sdk_test(const std::string& base_url, std::string* out, bool through_gateway) {
  const std::string exp_path = expectations(out);
  if (exp_path.empty()) return -1;
  return run_command({"/usr/bin/env", "NODE_PATH=" UMA_NODE_MODULES, "node",
                      UMA_SOURCE_DIR "/tests/http/anthropic_responses_sdk_test.js", base_url, exp_path,
                      through_gateway ? "gateway" : "direct"}, out, kSdkRunGuardSec);
}

static std::string chromium_path() {
  std::string out;
  if (run_command({"/bin/sh", "-c", "command -v chromium"}, &out) != 0) return {};
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out;
}

bool webui_test_available() {
  return node_sdks_available() && ::access(UMA_NODE_MODULES "/puppeteer-core", R_OK) == 0 && !chromium_path().empty();
}

int run_webui_test(const std::string& base_url, const std::string& key, const std::string& shots_dir, std::string* out,
                   const std::vector<std::string>& servers) {
  const std::string exp_path = expectations(out);
  if (exp_path.empty()) return -1;
  std::vector<std::string> cmd = {"/usr/bin/env", "NODE_PATH=" UMA_NODE_MODULES, "node", UMA_SOURCE_DIR "/tests/http/webui_test.js",
                                  base_url, exp_path, chromium_path(), shots_dir, key};
  std::string list;
  for (const std::string& s : servers) list += (list.empty() ? "" : ",") + s;
  if (!list.empty()) cmd.push_back(list);
  return run_command(cmd, out, kSdkRunGuardSec);
}

}  // namespace uma::test
