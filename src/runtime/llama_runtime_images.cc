// LlamaRuntime's decodes with images (llama_runtime.h): image entries as input embeddings in a
// llama_decode of their own, then the token entries as every other decode.
#include <llama.h>

#include <algorithm>
#include <cstring>

#include "runtime/argmax.h"
#include "runtime/llama_runtime.h"

namespace uma {

Status LlamaRuntime::decode_images(std::span<const BatchEntry> caller_batch) {
  const auto n_embd = static_cast<std::size_t>(llama_model_n_embd_inp(model_));
  image_embd_.clear();
  std::vector<std::int32_t> callers;  // caller's index of each image row
  token_entries_.clear();
  token_index_of_.assign(caller_batch.size(), -1);
  for (std::size_t i = 0; i < caller_batch.size(); ++i) {
    const BatchEntry& e = caller_batch[i];
    if (e.embd == nullptr) {
      token_index_of_[i] = static_cast<std::int32_t>(token_entries_.size());
      token_entries_.push_back(e);
      continue;
    }
    const std::size_t k = callers.size();
    image_embd_.insert(image_embd_.end(), e.embd, e.embd + n_embd);
    batch_pos_[k] = e.pos;
    batch_seq_[k] = e.seq;
    batch_logits_[k] = e.logits ? 1 : 0;
    callers.push_back(static_cast<std::int32_t>(i));
  }
  llama_batch b = batch_view(static_cast<int32_t>(callers.size()));
  b.embd = image_embd_.data();
  const int32_t rc = llama_decode(ctx_, b);
  if (rc == 0 || rc == 1) std::fill(copy_pending_.begin(), copy_pending_.end(), 0);  // applied before it looked for cells
  if (rc == 1) return Status(ErrorCode::kKvExhausted, "no KV cells for the batch");
  if (rc != 0) return Status(ErrorCode::kDecodeFailed, "llama_decode (image embeddings) returned " + std::to_string(rc));
  const auto n_vocab = static_cast<std::size_t>(llama_vocab_n_tokens(vocab_));
  for (std::size_t k = 0; k < callers.size(); ++k) {
    if (batch_logits_[k] == 0) continue;
    HeldRow h;
    h.caller_index = callers[k];
    if (!backend_greedy_.empty()) h.token = llama_get_sampled_token_ith(ctx_, static_cast<int32_t>(k));
    if (const float* row = llama_get_logits_ith(ctx_, static_cast<int32_t>(k)); row != nullptr && h.token < 0) {
      h.logits.assign(row, row + n_vocab);
    }
    held_.push_back(std::move(h));
  }
  if (token_entries_.empty()) return Status::Ok();
  return decode_tokens(token_entries_);
}

const LlamaRuntime::HeldRow* LlamaRuntime::held_row(std::int32_t caller_index) const {
  for (const HeldRow& h : held_) {
    if (h.caller_index == caller_index) return &h;
  }
  return nullptr;
}

Token LlamaRuntime::sample_held(std::int32_t seq, const HeldRow& row) {
  const auto s = static_cast<std::size_t>(seq);
  if (row.token >= 0) return row.token;
  if (row.logits.empty() || s >= samplers_.size() || samplers_[s] == nullptr) return llama_vocab_eos(vocab_);
  if (greedy_[s]) return argmax_first(row.logits.data(), static_cast<std::int32_t>(row.logits.size()));
  // What llama_sampler_sample does with a context's row, on the held copy.
  std::vector<llama_token_data> candidates(row.logits.size());
  for (std::size_t t = 0; t < candidates.size(); ++t) candidates[t] = {static_cast<llama_token>(t), row.logits[t], 0.0f};
  llama_token_data_array array{candidates.data(), candidates.size(), -1, false};
  llama_sampler_apply(samplers_[s], &array);
  const llama_token token = array.data[array.selected].id;
  llama_sampler_accept(samplers_[s], token);
  return token;
}

}  // namespace uma
