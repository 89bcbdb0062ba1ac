// The OpenAI Node SDK test (tests/http/openai_sdk_test.js) against any OpenAI base URL serving the
// oracle model with chatml (umad, or a gateway in front of such agents): its expectations computed
// from the oracle, then node run on them. Returns node's exit status (-1: it could not be set up).
#pragma once

#include <string>
#include <vector>

namespace uma::test {

int run_openai_sdk_test(const std::string& base_url, std::string* out);
// Whether node and the SDKs (scripts/npm_deps.sh) are here: an offline GPU server may have neither
// (scripts/test.sh then skips the tests named *NodeSdk* / *AnthropicSdk*; others skip their SDK part).
bool node_sdks_available();
// The Anthropic SDK (Messages) and the OpenAI SDK's Responses API against `base_url` (no /v1).
int run_anthropic_responses_sdk_test(const std::string& base_url, std::string* out, bool through_gateway = false);
// The official `ollama` library against `base_url` (Ollama's API), the model served as `model`.
// Images through the OpenAI and Anthropic SDKs and the ollama library (a daemon with --mmproj).
int run_vision_clients_test(const std::string& base_url, const std::string& model, int image_tokens, std::string* out);
int run_ollama_client_test(const std::string& base_url, const std::string& model, std::string* out,
                           bool through_gateway = false);
// The ollama library's chat with tools, unforced, on oracle-tool-call.gguf served as `model`
// (tests/http/ollama_tools_test.js): the model's call seen as message.tool_calls.
int run_ollama_tools_test(const std::string& base_url, const std::string& model, std::string* out);

// The web page at `base_url`/ in headless Chromium (tests/http/webui_test.js, puppeteer-core);
// `key`: the server's API key ("" when none). Screenshots go to `shots_dir`. `servers`: the umads
// that serve the requests (their metrics show a stopped one), when `base_url` is a gateway.
int run_webui_test(const std::string& base_url, const std::string& key, const std::string& shots_dir, std::string* out,
                   const std::vector<std::string>& servers = {});
// Whether node, puppeteer-core (scripts/npm_deps.sh) and Debian's chromium are here.
bool webui_test_available();

}  // namespace uma::test
