#include "http/rerank.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <numeric>

#include "common/json_text.h"

namespace uma::rerank {

namespace {

using json = nlohmann::ordered_json;

Status rerank_error(std::string message, const char* param) { return Status(ErrorCode::kBadRequest, std::move(message), param); }

void replace_all(std::string& s, std::string_view from, const std::string& to) {
  for (std::size_t at = 0; (at = s.find(from, at)) != std::string::npos; at += to.size()) s.replace(at, from.size(), to);
}

}  // namespace

Status parse(std::string_view body, std::size_t max_bytes, Request* out) {
  const json j = json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return Status(ErrorCode::kInvalidJson, "the body must be a JSON object");
  if (j.contains("model") && j["model"].is_string()) out->model = j["model"].get<std::string>();
  if (!j.contains("query")) return rerank_error("\"query\" must be provided", "query");
  if (!j["query"].is_string()) return rerank_error("\"query\" must be a string", "query");
  out->query = j["query"].get<std::string>();
  out->tei = j.contains("texts");
  const char* field = out->tei ? "texts" : "documents";
  const json docs = j.value(field, json());
  if (!docs.is_array() || docs.empty()) return rerank_error(std::string("\"") + field + "\" must be a non-empty string array", field);
  if (docs.size() > kMaxDocuments) return rerank_error("at most " + std::to_string(kMaxDocuments) + " documents", field);
  std::size_t bytes = out->query.size() * docs.size();
  for (const json& d : docs) {
    // Cohere's and Jina's documents may also be {"text": ...}.
    const json* text = d.is_string() ? &d : d.is_object() && d.contains("text") && d["text"].is_string() ? &d["text"] : nullptr;
    if (text == nullptr) return rerank_error(std::string("\"") + field + "\" must be a non-empty string array", field);
    out->documents.push_back(text->get<std::string>());
    bytes += out->documents.back().size();
  }
  if (bytes > max_bytes) return Status(ErrorCode::kPromptTooLarge, "the query and documents are " + std::to_string(bytes) +
                                                                     " bytes with the query once per document; at most " +
                                                                     std::to_string(max_bytes));
  out->top_n = static_cast<std::int32_t>(out->documents.size());
  if (j.contains("top_n")) {
    if (!j["top_n"].is_number_integer() || j["top_n"].get<std::int64_t>() < 1) return rerank_error("\"top_n\" must be a positive integer", "top_n");
    out->top_n = static_cast<std::int32_t>(std::min<std::int64_t>(j["top_n"].get<std::int64_t>(), out->top_n));
  }
  const char* text_flag = out->tei ? "return_text" : "return_documents";
  if (j.contains(text_flag)) {
    if (!j[text_flag].is_boolean()) return rerank_error(std::string("\"") + text_flag + "\" must be a boolean", text_flag);
    out->return_text = j[text_flag].get<bool>();
  }
  return {};
}

Status pair_tokens(const std::string& query, const std::string& document, const http_route::Context& ctx,
                   std::vector<std::int32_t>* out) {
  const http_route::ModelFacts& f = *ctx.facts;
  out->clear();
  if (!f.rerank_template.empty()) {
    std::string prompt = f.rerank_template;
    replace_all(prompt, "{query}", query);
    replace_all(prompt, "{document}", document);
    return (*ctx.tokenize)(prompt, /*add_special=*/false, /*parse_special=*/true, out);
  }
  std::vector<std::int32_t> q, d;
  if (Status st = (*ctx.tokenize)(query, false, false, &q); !st.ok()) return st;
  if (Status st = (*ctx.tokenize)(document, false, false, &d); !st.ok()) return st;
  const std::int32_t eos = f.eos >= 0 ? f.eos : f.sep;
  if (f.add_bos && f.bos >= 0) out->push_back(f.bos);
  out->insert(out->end(), q.begin(), q.end());
  if (f.add_eos && eos >= 0) out->push_back(eos);
  if (f.add_sep && f.sep >= 0) out->push_back(f.sep);
  out->insert(out->end(), d.begin(), d.end());
  if (f.add_eos && eos >= 0) out->push_back(eos);
  return {};
}

std::string response(const Request& r, const std::vector<std::vector<float>>& scores, std::int32_t prompt_tokens) {
  std::vector<std::size_t> order(scores.size());
  std::iota(order.begin(), order.end(), 0);
  const auto score = [&scores](std::size_t i) { return scores[i].empty() ? 0.0f : scores[i][0]; };
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return score(a) > score(b); });
  order.resize(std::min<std::size_t>(order.size(), static_cast<std::size_t>(std::max(r.top_n, 0))));
  json results = json::array();
  for (std::size_t i : order) {
    json e = {{"index", i}, {r.tei ? "score" : "relevance_score", score(i)}};
    if (r.return_text && i < r.documents.size()) {
      if (r.tei) e["text"] = r.documents[i];
      else e["document"] = {{"text", r.documents[i]}};
    }
    results.push_back(std::move(e));
  }
  if (r.tei) return to_json_text(results);
  return to_json_text(json{{"model", r.model},
                           {"object", "list"},
                           {"usage", {{"prompt_tokens", prompt_tokens}, {"total_tokens", prompt_tokens}}},
                           {"results", results}});
}

}  // namespace uma::rerank
