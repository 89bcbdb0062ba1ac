#include "http/llama_server_api.h"

#include "common/json_fields.h"

#include <nlohmann/json.hpp>

#include "common/json_text.h"
#include "common/utf8.h"
#include "http/anthropic.h"

namespace uma::http_route {
namespace {

using json = nlohmann::ordered_json;

Reply json_reply(const json& j) { return Reply{200, "application/json", to_json_text(j), ErrorCode::kOk}; }

Status bad(const char* field, const std::string& what) {
  return Status(ErrorCode::kBadRequest, "'" + std::string(field) + "' " + what, field);
}

json generation_settings(const Context& ctx) {
  const SamplingParams& s = *ctx.default_sampling;
  return {{"n_ctx", ctx.facts->n_ctx_seq},
          {"params",
           {{"temperature", s.temperature}, {"top_k", s.top_k}, {"top_p", s.top_p}, {"min_p", s.min_p},
            {"repeat_penalty", s.repeat_penalty}, {"presence_penalty", s.presence_penalty},
            {"frequency_penalty", s.frequency_penalty}, {"seed", s.seed}}}};
}

// A chat body (OpenAI's) rendered with the model's template: the prompt text.
Status render(std::string_view chat_body, const Context& ctx, std::string* prompt, std::vector<std::string>* images = nullptr) {
  openai::CompletionRequest r;
  if (Status st = openai::parse_request(chat_body, true, *ctx.limits, *ctx.default_sampling, &r); !st.ok()) return st;
  if (ctx.chat_template == nullptr || !*ctx.chat_template) return Status(ErrorCode::kBadRequest, "chat is not available");
  ChatPrompt p;
  const ChatRequest chat{r.messages,        r.tools,          r.tool_choice,           r.forced_tool,
                         r.parallel_tool_calls, r.model,      r.template_kwargs,       r.enable_thinking,
                         r.add_generation_prompt, r.continuation};
  if (Status st = (*ctx.chat_template)(chat, &p); !st.ok()) return st;
  *prompt = std::move(p.text);
  if (images != nullptr) *images = std::move(r.images);
  return Status::Ok();
}

Reply tokenize(const json& j, const Context& ctx) {
  const auto content = j.find("content");
  if (content == j.end() || !content->is_string()) return error_reply(bad("content", "must be a string"));
  const std::string& text = content->get_ref<const std::string&>();
  if (text.size() > ctx.limits->max_prompt_bytes) return error_reply(Status(ErrorCode::kPromptTooLarge, "content is over the prompt limit"));
  auto flag = [&](const char* key, bool dflt) {
    const auto it = j.find(key);
    return it != j.end() && it->is_boolean() ? it->get<bool>() : dflt;
  };
  std::vector<std::int32_t> tokens;
  if (Status st = (*ctx.tokenize)(text, flag("add_special", false), flag("parse_special", true), &tokens); !st.ok()) {
    return error_reply(st);
  }
  json out = json::array();
  const bool pieces = flag("with_pieces", false) && ctx.token_text != nullptr;
  for (std::int32_t t : tokens) {
    if (!pieces) {
      out.push_back(t);
      continue;
    }
    // llama-server's shape: the piece as text when it is whole UTF-8, else its bytes.
    const std::string piece = (*ctx.token_text)(t);
    out.push_back({{"id", t}, {"piece", is_valid_utf8(piece) ? json(piece) : byte_array<json>(piece)}});
  }
  return json_reply({{"tokens", out}});
}

Reply detokenize(const json& j, const Context& ctx) {
  const auto tokens = j.find("tokens");
  if (tokens == j.end() || !tokens->is_array()) return error_reply(bad("tokens", "must be an array of token ids"));
  std::vector<std::int32_t> ids;
  if (!json_token_ids(*tokens, &ids, ctx.facts->n_vocab - 1)) {
    return error_reply(bad("tokens", "must be an array of token ids in the vocabulary"));
  }
  std::string text;
  for (std::int32_t t : ids) text += (*ctx.token_text)(t);
  return json_reply({{"content", text}});
}

}  // namespace

std::string models_body(const Context& ctx) {
  json m = {{"id", ctx.model_id}, {"object", "model"}, {"created", ctx.facts != nullptr ? ctx.facts->created : 0},
            {"owned_by", "umad"}, {"root", ctx.model_id},   // vLLM's `root`: vllm bench serve reads it
            {"aliases", json::array()}, {"tags", json::array()}};  // llama-server's: its clients read them
  if (ctx.facts != nullptr) {
    const ModelFacts& f = *ctx.facts;
    m["max_model_len"] = f.n_ctx_seq;  // vLLM's name for the context a request may use
    m["meta"] = {{"n_ctx", f.n_ctx_seq}, {"n_ctx_train", f.n_ctx_train}, {"n_vocab", f.n_vocab},
                 {"n_params", f.n_params}, {"size", f.size_bytes}};
  }
  return to_json_text(json{{"object", "list"}, {"data", json::array({m})}});
}

std::string props_body(const Context& ctx) {
  const ModelFacts& f = *ctx.facts;
  return to_json_text(json{{"default_generation_settings", generation_settings(ctx)},
                           {"total_slots", f.max_sessions},
                           {"model_alias", ctx.model_id},
                           {"model_path", f.path},
                           {"chat_template", f.chat_template},
                           {"modalities", {{"vision", f.vision}, {"audio", false}}},
                           {"build_info", "umad"}});
}

std::string slots_body(const Context& ctx) {
  const ModelFacts& f = *ctx.facts;
  const double busy = ctx.metrics != nullptr ? ctx.metrics->active_sessions.load() : 0.0;
  json slots = json::array();
  for (std::int32_t i = 0; i < f.max_sessions; ++i) {
    slots.push_back({{"id", i}, {"n_ctx", f.n_ctx_seq}, {"is_processing", i < busy}});
  }
  return to_json_text(slots);
}

Reply vocabulary_endpoint(const std::string& path, std::string_view body, const Context& ctx) {
  if (path == "/v1/messages/count_tokens") {
    std::string chat_body, prompt;
    std::vector<std::string> images;
    if (Status st = anthropic::count_body_to_chat_body(body, &chat_body); !st.ok()) return error_reply(st);
    if (Status st = render(chat_body, ctx, &prompt, &images); !st.ok()) return error_reply(st);
    if (!images.empty() && ctx.count_with_images != nullptr && *ctx.count_with_images) {
      std::int32_t n = 0;
      if (Status st = (*ctx.count_with_images)(prompt, images, &n); !st.ok()) return error_reply(st);
      return json_reply({{"input_tokens", n}});
    }
    std::vector<std::int32_t> tokens;
    if (Status st = (*ctx.tokenize)(prompt, true, true, &tokens); !st.ok()) return error_reply(st);
    return json_reply({{"input_tokens", tokens.size()}});
  }
  if (path == "/apply-template") {
    std::string prompt;
    if (Status st = render(body, ctx, &prompt); !st.ok()) return error_reply(st);
    return json_reply({{"prompt", prompt}});
  }
  const json j = json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return error_reply(Status(ErrorCode::kInvalidJson, "the body must be a JSON object"));
  return path == "/tokenize" ? tokenize(j, ctx) : detokenize(j, ctx);
}

}  // namespace uma::http_route

namespace uma {
namespace {

class LlamaServerWriter final : public ReplyWriter {
 public:
  using json = nlohmann::ordered_json;
  LlamaServerWriter(const openai::CompletionRequest& r, std::string id) : r_(r), id_(std::move(id)) {}

  void open(std::size_t, std::string&) override {}

  void delta(std::size_t index, const ChatDelta& d, std::span<const LogprobEntry> logprobs, std::size_t, std::string& out) override {
    tokens_ += 1;
    has_new_line_ = has_new_line_ || d.content.find('\n') != std::string::npos;
    json j = {{"index", index}, {"content", d.content}, {"stop", false}, {"id_slot", -1}};
    if (r_.logprobs > 0) j["completion_probabilities"] = probabilities(logprobs);
    sse_event(out, to_json_text(j));
  }

  void finish(std::size_t index, const ChoiceEnd& end, std::span<const LogprobEntry>, std::size_t, std::string& out) override {
    ends_.resize(std::max(ends_.size(), index + 1));
    ends_[index] = {std::string(end.reason), std::string(end.stop_word)};
  }

  void close(const openai::Usage& u, std::string& out) override {
    for (std::size_t i = 0; i < std::max<std::size_t>(1, ends_.size()); ++i) {
      json j = last(i < ends_.size() ? ends_[i] : End{}, u);
      j["index"] = i;
      j["content"] = "";
      j["has_new_line"] = has_new_line_;
      sse_event(out, to_json_text(cut(j)));
    }
  }

  void fail(const Status& st, std::string& out) override { sse_event(out, error_body(st)); }

  void progress(const PromptProgress& p, std::string& out) override {
    json j = {{"index", 0}, {"content", ""}, {"tokens", json::array()}, {"stop", false}, {"id_slot", -1},
              {"tokens_predicted", 0}, {"tokens_evaluated", p.total},
              {"prompt_progress", {{"total", p.total}, {"cache", p.cache}, {"processed", p.processed},
                                   {"time_ms", static_cast<std::int64_t>(p.time_ms)}}}};
    sse_event(out, to_json_text(j));
  }

  std::string whole(std::span<const WholeChoice> choices, const openai::Usage& u) override {
    auto one = [&](const WholeChoice& c, std::size_t i) { return cut(final_object(c, u, i)); };
    if (choices.size() == 1) return to_json_text(one(choices[0], 0));
    json all = json::array();
    for (std::size_t i = 0; i < choices.size(); ++i) all.push_back(one(choices[i], i));
    return to_json_text(all);
  }

  // The whole answer's object for one choice, all its fields.
  json final_object(const WholeChoice& c, const openai::Usage& u, std::size_t index) const {
    json j = last({std::string(c.end.reason), std::string(c.end.stop_word)}, u);
    j["index"] = index;
    j["content"] = c.text;
    j["has_new_line"] = c.text.find('\n') != std::string::npos;
    if (r_.logprobs > 0) j["completion_probabilities"] = probabilities(c.logprobs);
    return j;
  }

  std::string error_body(const Status& st) const override { return http_error_body(st); }

 private:
  struct End {
    std::string reason, stop_word;
  };
  // n_probs: each generated token with its log-probability and the most likely alternatives, in
  // llama-server's shape.
  static json token_json(const TokenLogprob& t) {
    json bytes = json::array();
    for (unsigned char ch : t.text) bytes.push_back(ch);
    return {{"id", t.token}, {"token", t.text}, {"logprob", t.logprob}, {"bytes", bytes}};
  }
  static json probabilities(std::span<const LogprobEntry> entries) {
    json all = json::array();
    for (const LogprobEntry& e : entries) {
      json one = token_json(e.chosen);
      json top = json::array();
      for (const TokenLogprob& t : e.top) top.push_back(token_json(t));
      one["top_logprobs"] = std::move(top);
      all.push_back(std::move(one));
    }
    return all;
  }
  // response_fields: only those paths, each a key of the answer ("a/b" lifts b out of a); a path
  // that is not there is left out.
  json cut(json j) const {
    if (r_.response_fields.empty()) return j;
    json kept = json::object();
    for (const std::string& path : r_.response_fields) {
      const json* at = &j;
      for (std::size_t from = 0; at != nullptr && from <= path.size();) {
        const std::size_t to = std::min(path.find('/', from), path.size());
        const std::string key = path.substr(from, to - from);
        at = at->is_object() && at->contains(key) ? &(*at)[key] : nullptr;
        from = to + 1;
      }
      if (at != nullptr) kept[path] = *at;
    }
    return kept;
  }
  // The fields of the last object: how it stopped (llama-server's stop_type: eos, limit, word).
  json last(const End& e, const openai::Usage& u) const {
    const char* type = e.reason == "length" ? "limit" : !e.stop_word.empty() ? "word" : "eos";
    const std::int32_t prompt_n = u.prompt_tokens - u.cached_tokens;  // computed, not taken from the cache
    const auto per_token = [](double ms, std::int32_t n) { return n > 0 ? ms / n : 0.0; };
    const auto per_second = [](double ms, std::int32_t n) { return ms > 0 ? 1e3 * n / ms : 0.0; };
    json timings = {{"cache_n", u.cached_tokens}, {"prompt_n", prompt_n}, {"prompt_ms", u.prompt_ms},
                    {"prompt_per_token_ms", per_token(u.prompt_ms, prompt_n)},
                    {"prompt_per_second", per_second(u.prompt_ms, prompt_n)},
                    {"predicted_n", u.completion_tokens}, {"predicted_ms", u.predicted_ms},
                    {"predicted_per_token_ms", per_token(u.predicted_ms, u.completion_tokens)},
                    {"predicted_per_second", per_second(u.predicted_ms, u.completion_tokens)}};
    const SamplingParams& s = r_.sampling;
    json settings = {{"n_predict", r_.max_tokens ? *r_.max_tokens : -1}, {"seed", s.seed}, {"temperature", s.temperature},
                     {"top_k", s.top_k}, {"top_p", s.top_p}, {"min_p", s.min_p}, {"repeat_penalty", s.repeat_penalty},
                     {"stop", r_.stop}, {"stream", r_.stream}, {"n_probs", std::max(0, r_.logprobs)},
                     {"grammar", r_.grammar}};
    const std::string prompt = r_.prompts.empty() ? std::string() : r_.prompts.front().text;
    return {{"index", 0}, {"content", ""}, {"tokens", json::array()}, {"id_slot", -1}, {"stop", true},
            {"model", r_.model.empty() ? "umad" : r_.model}, {"prompt", prompt},
            {"tokens_predicted", u.completion_tokens}, {"tokens_evaluated", u.prompt_tokens},
            {"tokens_cached", u.cached_tokens}, {"stop_type", type}, {"stopping_word", e.stop_word},
            {"truncated", false}, {"timings", timings}, {"generation_settings", settings}};
  }

  const openai::CompletionRequest& r_;
  std::string id_;
  std::vector<End> ends_;
  std::int64_t tokens_ = 0;
  bool has_new_line_ = false;
};

}  // namespace

std::unique_ptr<ReplyWriter> llama_server_writer(const openai::CompletionRequest& r, std::string id, std::int64_t) {
  return std::make_unique<LlamaServerWriter>(r, std::move(id));
}

std::string llama_server_final(const openai::CompletionRequest& r, const WholeChoice& c, const openai::Usage& u) {
  return to_json_text(LlamaServerWriter(r, "").final_object(c, u, 0));
}

}  // namespace uma
