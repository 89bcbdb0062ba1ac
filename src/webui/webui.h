// The web page umad and uma-gw serve at / (off with --no-webui): a chat and a status view, plain
// static files compiled into the binary (src/webui/*.html through embed.cmake), which talk to the
// same server's API (/v1/models, /v1/chat/completions, /metrics). The page itself is served
// without the API key, as llama-server's is: it holds nothing, and every request it makes carries
// the key the user gives it.
#pragma once

#include <optional>
#include <string_view>

namespace uma::webui {

struct Asset {
  std::string_view content_type;
  std::string_view body;
};

// The file at `path` ("/" and "/index.html": the page), or nullopt.
std::optional<Asset> asset(std::string_view path);

// The paths asset() answers, for the key's exemptions.
inline constexpr std::string_view kPaths[] = {"/", "/index.html"};

}  // namespace uma::webui
