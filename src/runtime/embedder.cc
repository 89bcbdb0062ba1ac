#include "runtime/embedder.h"

#include <llama.h>

#include <algorithm>
#include <cmath>

namespace uma {

namespace {
constexpr std::int32_t kSequences = 16;  // inputs in one pass
}  // namespace

std::unique_ptr<Embedder> Embedder::open(llama_model* model, std::int32_t max_tokens, std::int32_t n_threads, Status* st) {
  std::unique_ptr<Embedder> e(new Embedder());
  e->model_ = model;
  e->max_tokens_ = max_tokens;
  e->max_seqs_ = kSequences;
  auto make = [&](enum llama_pooling_type pooling) {
    llama_context_params cp = llama_context_default_params();
    cp.embeddings = true;
    cp.pooling_type = pooling;
    cp.n_ctx = static_cast<uint32_t>(max_tokens);
    // An input is one ubatch: non-causal (encoder) models attend over the whole input at once.
    cp.n_batch = cp.n_ubatch = static_cast<uint32_t>(max_tokens);
    cp.n_seq_max = kSequences;
    cp.kv_unified = true;
    cp.n_threads = cp.n_threads_batch = n_threads;
    cp.no_perf = true;
    return llama_init_from_model(model, cp);
  };
  e->ctx_ = make(LLAMA_POOLING_TYPE_UNSPECIFIED);  // the model's own
  if (e->ctx_ != nullptr && llama_pooling_type(e->ctx_) == LLAMA_POOLING_TYPE_NONE) {
    llama_free(e->ctx_);  // a generative model: its tokens' states, averaged
    e->ctx_ = make(LLAMA_POOLING_TYPE_MEAN);
  }
  if (e->ctx_ == nullptr) {
    *st = Status(ErrorCode::kModelLoad, "cannot create the embeddings context");
    return nullptr;
  }
  e->pooling_ = llama_pooling_type(e->ctx_);
  // A reranker's pooled output is its classifier's scores (the first is the relevance).
  e->dims_ = e->pooling_ == LLAMA_POOLING_TYPE_RANK ? std::max<std::int32_t>(1, static_cast<std::int32_t>(llama_model_n_cls_out(model)))
                                                   : llama_model_n_embd_out(model);
  *st = Status::Ok();
  return e;
}

Embedder::~Embedder() {
  if (ctx_ != nullptr) llama_free(ctx_);
}

const char* Embedder::pooling() const {
  switch (pooling_) {
    case LLAMA_POOLING_TYPE_MEAN: return "mean";
    case LLAMA_POOLING_TYPE_CLS: return "cls";
    case LLAMA_POOLING_TYPE_LAST: return "last";
    case LLAMA_POOLING_TYPE_RANK: return "rank";
    default: return "none";
  }
}

Status Embedder::embed(std::span<const std::vector<Token>> inputs, std::vector<std::vector<float>>* out) {
  out->clear();
  // Passes of up to kSequences inputs and max_tokens tokens.
  std::size_t from = 0;
  while (from < inputs.size()) {
    std::size_t to = from, tokens = 0;
    while (to < inputs.size() && to - from < static_cast<std::size_t>(kSequences) &&
           (to == from || tokens + inputs[to].size() <= static_cast<std::size_t>(max_tokens_))) {
      tokens += inputs[to].size();
      ++to;
    }
    if (Status st = pass(inputs.subspan(from, to - from), out); !st.ok()) return st;
    from = to;
  }
  return Status::Ok();
}

Status Embedder::pass(std::span<const std::vector<Token>> inputs, std::vector<std::vector<float>>* out) {
  std::size_t total = 0;
  for (const auto& in : inputs) {
    if (in.empty() || in.size() > static_cast<std::size_t>(max_tokens_)) {
      return Status(ErrorCode::kBadRequest, "an input of " + std::to_string(in.size()) + " tokens (1 to " +
                                                std::to_string(max_tokens_) + " fit)", "input");
    }
    total += in.size();
  }
  llama_batch batch = llama_batch_init(static_cast<int32_t>(total), 0, 1);
  for (std::size_t s = 0; s < inputs.size(); ++s) {
    for (std::size_t i = 0; i < inputs[s].size(); ++i) {
      const int32_t n = batch.n_tokens++;
      batch.token[n] = inputs[s][i];
      batch.pos[n] = static_cast<llama_pos>(i);
      batch.n_seq_id[n] = 1;
      batch.seq_id[n][0] = static_cast<llama_seq_id>(s);
      batch.logits[n] = true;
    }
  }
  llama_memory_clear(llama_get_memory(ctx_), true);
  const bool encoder_only = llama_model_has_encoder(model_) && !llama_model_has_decoder(model_);
  const int32_t rc = encoder_only ? llama_encode(ctx_, batch) : llama_decode(ctx_, batch);
  llama_batch_free(batch);
  if (rc != 0) return Status(ErrorCode::kInternal, "the embeddings pass failed (" + std::to_string(rc) + ")");
  for (std::size_t s = 0; s < inputs.size(); ++s) {
    const float* v = llama_get_embeddings_seq(ctx_, static_cast<llama_seq_id>(s));
    if (v == nullptr) return Status(ErrorCode::kInternal, "no pooled embedding for an input");
    std::vector<float> e(v, v + dims_);
    if (pooling_ == LLAMA_POOLING_TYPE_RANK) {  // scores, not a direction: as they are
      out->push_back(std::move(e));
      continue;
    }
    double norm = 0.0;
    for (float x : e) norm += static_cast<double>(x) * x;
    norm = std::sqrt(norm);
    if (norm > 0.0) {
      for (float& x : e) x = static_cast<float>(x / norm);
    }
    out->push_back(std::move(e));
  }
  return Status::Ok();
}

void Embedder::set_threads(std::int32_t n) { llama_set_n_threads(ctx_, n, n); }

}  // namespace uma
