// Ollama's API on umad, for the clients that speak only it (Open WebUI, Continue, editors, the
// official `ollama` libraries): /api/chat and /api/generate run as umad's chat (or, with raw, plain
// completion) requests and answer in Ollama's shape, one JSON object per line when streamed
// (stream defaults to true); /api/embed and /api/embeddings run as embeddings; /api/tags, /api/ps,
// /api/show and /api/version tell about the one model this daemon serves; /api/pull of it is done
// at once (its file is here). `options` map to
// sampling fields (num_predict, temperature, top_k, top_p, min_p, seed, stop, repeat_penalty, ...);
// `format` ("json" or a schema) to a grammar; `think` to the template's thinking switch. Errors are
// {"error": "..."} with their HTTP status. What umad cannot do is refused by name: images without a
// vision projector (--mmproj), a template override; fields that change nothing here (keep_alive on a
// single-model daemon, num_ctx, num_gpu, ...) are named in X-Uma-Ignored-Fields.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <chrono>
#include <string>
#include <string_view>
#include <vector>

#include "http/http_router.h"

namespace uma {

// The Ollama release whose API this follows: clients gate features on /api/version.
inline constexpr std::string_view kOllamaApiVersion = "0.12.0";

// RFC 3339 in UTC with microseconds, as Ollama writes its times.
std::string ollama_time(std::chrono::system_clock::time_point t);

// The writer of /api/chat's answers: one JSON object per line, a tool call's pieces gathered into
// one message whose arguments are an object (Ollama's shape).
std::unique_ptr<ReplyWriter> ollama_chat_writer(const openai::CompletionRequest& r, std::string id, std::int64_t created);

// Ollama's error body, {"error": "..."} (its status is the caller's: http_status(st.code())).
std::string ollama_error_body(const Status& st);

// The answer to /api/embed ({"embeddings": [...]}) or, legacy, /api/embeddings ({"embedding": [...]}).
std::string ollama_embeddings_response(const std::string& model, const std::vector<std::vector<float>>& vectors,
                                       std::int32_t prompt_tokens, bool legacy);

}  // namespace uma

namespace uma::http_route {

// Ollama's /api/pull on a server whose models' files are here (`have` says which): the model it has
// is pulled at once (streamed: its last progress lines; stream false: {"status":"success"}); any
// other is a 404. Bad bodies are 400s. Ollama's shape throughout.
Reply ollama_pull_local(std::string_view body, const std::function<bool(const std::string& model)>& have);

// The answer to an /api/... request, or nothing for any other path.
std::optional<Routed> ollama_route(boost::beast::http::verb method, std::string_view path, std::string_view body,
                                   const Context& ctx);

}  // namespace uma::http_route
