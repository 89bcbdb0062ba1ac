#include "http/infill.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <vector>

#include "common/json_text.h"

namespace uma::http_route {

namespace {

using FimJson = nlohmann::json;
using Tokens = std::vector<std::int32_t>;

Status infill_error(std::string message, const char* param) {
  return Status(ErrorCode::kInvalidArgument, std::move(message), param);
}

// Text tokenized without specials, or token ids and text mixed (llama-server's tokenize_mixed).
Status fim_tokens_of(const FimJson& v, const Context& ctx, const char* field, Tokens* out) {
  const auto text = [&](const std::string& s) {
    Tokens t;
    Status st = (*ctx.tokenize)(s, /*add_special=*/false, /*parse_special=*/false, &t);
    out->insert(out->end(), t.begin(), t.end());
    return st;
  };
  if (v.is_string()) return text(v.get<std::string>());
  if (!v.is_array()) return infill_error(std::string("\"") + field + "\" must be a string or an array of token ids and strings", field);
  for (const FimJson& piece : v) {
    if (piece.is_string()) {
      if (Status st = text(piece.get<std::string>()); !st.ok()) return st;
    } else if (piece.is_number_integer() && piece.get<std::int64_t>() >= 0 && piece.get<std::int64_t>() < ctx.facts->n_vocab) {
      out->push_back(piece.get<std::int32_t>());
    } else {
      return infill_error(std::string("\"") + field + "\" holds something that is neither a token id of this model nor a string", field);
    }
  }
  return {};
}

}  // namespace

Status infill_body(std::string_view body, const Context& ctx, std::string* out) {
  const ModelFacts& f = *ctx.facts;
  std::string missing;
  if (f.fim_pre < 0) missing += " prefix token is missing.";
  if (f.fim_suf < 0) missing += " suffix token is missing.";
  if (f.fim_mid < 0) missing += " middle token is missing.";
  if (!missing.empty()) return Status(ErrorCode::kNotSupported, "Infill is not supported by this model:" + missing);
  FimJson data = FimJson::parse(body, nullptr, false);
  if (data.is_discarded() || !data.is_object()) return Status(ErrorCode::kInvalidJson, "the body must be a JSON object");
  if (data.contains("prompt") && !data["prompt"].is_string()) return infill_error("\"prompt\" must be a string", "prompt");
  if (!data.contains("input_prefix")) return infill_error("\"input_prefix\" is required", "input_prefix");
  if (!data.contains("input_suffix")) return infill_error("\"input_suffix\" is required", "input_suffix");
  const FimJson extra = data.value("input_extra", FimJson::array());
  if (!extra.is_array()) return infill_error("\"input_extra\" must be an array of {\"filename\": string, \"text\": string}", "input_extra");
  for (const FimJson& chunk : extra) {
    if (!chunk.is_object() || !chunk.contains("text") || !chunk["text"].is_string()) {
      return infill_error("an input_extra chunk must hold a \"text\" string", "input_extra");
    }
    if (chunk.contains("filename") && !chunk["filename"].is_string()) return infill_error("an input_extra chunk's \"filename\" must be a string", "input_extra");
  }
  Tokens prefix, suffix, prompt, extra_tokens;
  if (Status st = fim_tokens_of(data["input_prefix"], ctx, "input_prefix", &prefix); !st.ok()) return st;
  if (Status st = fim_tokens_of(data["input_suffix"], ctx, "input_suffix", &suffix); !st.ok()) return st;
  if (data.contains("prompt")) {
    if (Status st = (*ctx.tokenize)(data["prompt"].get<std::string>(), false, /*parse_special=*/true, &prompt); !st.ok()) return st;
  }
  const auto text = [&](const std::string& s, Tokens* into) {
    Tokens t;
    Status st = (*ctx.tokenize)(s, false, false, &t);
    into->insert(into->end(), t.begin(), t.end());
    return st;
  };
  if (f.fim_rep >= 0) {
    extra_tokens.push_back(f.fim_rep);
    if (Status st = text("myproject\n", &extra_tokens); !st.ok()) return st;
  }
  for (const FimJson& chunk : extra) {
    if (f.fim_sep >= 0) {
      extra_tokens.push_back(f.fim_sep);
      if (Status st = text(chunk.value("filename", std::string("tmp")) + "\n", &extra_tokens); !st.ok()) return st;
    } else if (Status st = text("\n\n--- snippet ---\n\n", &extra_tokens); !st.ok()) {
      return st;
    }
    if (Status st = text(chunk["text"].get<std::string>(), &extra_tokens); !st.ok()) return st;
  }
  if (f.fim_sep >= 0) {
    extra_tokens.push_back(f.fim_sep);
    if (Status st = text("filename\n", &extra_tokens); !st.ok()) return st;
  }
  // The FIM context fits a batch: prefix and suffix 3:1; the extra context fills the rest of the
  // room but what the answer needs (llama-server's server-wide n_predict: -1, none).
  const int n_batch = std::max(f.n_batch, 4);
  const int n_prefix = std::min<int>(static_cast<int>(prefix.size()), 3 * (n_batch / 4));
  const int n_suffix = std::min<int>(static_cast<int>(suffix.size()), std::max<int>(0, n_batch / 4 - (2 + static_cast<int>(prompt.size()))));
  const int n_extra = std::min<int>(std::max<int>(0, f.n_ctx_seq - n_batch + 2), static_cast<int>(extra_tokens.size()));
  prefix.erase(prefix.begin(), prefix.end() - n_prefix);
  suffix.resize(static_cast<std::size_t>(n_suffix));
  Tokens tokens(extra_tokens.end() - n_extra, extra_tokens.end());
  if (f.add_bos && f.bos >= 0) tokens.push_back(f.bos);
  tokens.push_back(f.fim_pre);
  tokens.insert(tokens.end(), prefix.begin(), prefix.end());
  tokens.insert(tokens.end(), prompt.begin(), prompt.end());
  tokens.push_back(f.fim_suf);
  tokens.insert(tokens.end(), suffix.begin(), suffix.end());
  tokens.push_back(f.fim_mid);
  for (const char* k : {"input_prefix", "input_suffix", "input_extra"}) data.erase(k);
  data["prompt"] = tokens;
  *out = to_json_text(data);
  return {};
}

}  // namespace uma::http_route
