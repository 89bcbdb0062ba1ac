// Reranking at the HTTP edge (llama-server's POST /rerank, /v1/rerank, /reranking, /v1/reranking):
// a `query` and `documents` (Jina's and Cohere's shape; `texts`: TEI's), `top_n`. Each document
// is scored with the query by a reranking model (rank pooling: the classifier's first output for
// the pair, runtime/embedder.h); the answer lists them best first. The pair's prompt is the
// model's "rerank" template with {query} and {document} filled in, else
//   [BOS] query [EOS] [SEP] document [EOS]
// each special where the vocabulary adds it (llama-server's format_prompt_rerank). Pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "http/http_router.h"

namespace uma::rerank {

inline constexpr std::size_t kMaxDocuments = 1000;

struct Request {
  std::string model;
  std::string query;
  std::vector<std::string> documents;
  std::int32_t top_n = 0;    // the best this many (all by default)
  bool tei = false;          // TEI's shape: `texts` in, an array of {index, score[, text]} out
  bool return_text = false;  // TEI: each result with its text; Jina/Cohere: `return_documents`
};

// kInvalidJson / kBadRequest naming the field; kPromptTooLarge past max_bytes of text in all.
Status parse(std::string_view body, std::size_t max_bytes, Request* out);
// The tokens of the query with one document. Needs ctx.tokenize and ctx.facts.
Status pair_tokens(const std::string& query, const std::string& document, const http_route::Context& ctx,
                   std::vector<std::int32_t>* out);
// The answer: `scores[i]` the classifier's outputs for documents[i] (the first is the score).
std::string response(const Request& r, const std::vector<std::vector<float>>& scores, std::int32_t prompt_tokens);

}  // namespace uma::rerank
