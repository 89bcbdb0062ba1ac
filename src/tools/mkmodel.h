// Writing llama-architecture GGUF test models: seeded random weights of a realistic shape plus the
// real SentencePiece tokenizer copied from llama.cpp's vocab-only GGUF. Random weights cost exactly
// what trained weights of the same shape cost, so these measure speed faithfully.
//
// The `oracle` preset is built so that the greedy next token is always (last token + 1) mod
// n_vocab, by a wide margin and whatever the batch: embeddings are random unit vectors, output
// row j is the embedding of token j-1, norms are 1, and attn_output / ffn_down are zero, so the
// residual stream carries the last token's embedding to the head unchanged.
//
// Deterministic: the same preset, type and seed give the same bytes.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <vector>
#include <string>

#include "common/status.h"

struct gguf_context;

namespace uma {

struct ModelShape {
  std::string name;
  std::int32_t n_embd = 0;
  std::int32_t n_layer = 0;
  std::int32_t n_head = 0;
  std::int32_t n_head_kv = 0;
  std::int32_t n_ff = 0;
  bool oracle = false;
};

// Presets: tiny, small, 1b, oracle. Returns false for an unknown name.
bool find_preset(const std::string& name, ModelShape* out);

struct MkModelOptions {
  ModelShape shape;
  std::string type = "f32";   // f32 | f16 | q8_0 | q4_0
  std::uint64_t seed = 1;
  std::string vocab_path;     // llama.cpp models/ggml-vocab-llama-spm.gguf
  std::string out_path;
  std::int32_t threads = 0;   // for quantization; 0 = all
  std::string chat_template;  // written as tokenizer.chat_template when not empty (a model family's)
  bool no_bos = false;        // tokenizer.ggml.add_bos_token = false: another vocabulary (tests)
  // Fill-in-the-middle tokens (tokenizer.ggml.fim_{pre,suf,mid,rep,sep}_token_id), ids of the
  // vocabulary; empty: none. Three (pre, suf, mid) or five.
  std::vector<std::int32_t> fim_tokens;
  // Token texts replaced (id -> text), made user-defined tokens (their text verbatim): what the
  // oracle says after a given token is then chosen (a tool call it makes unforced, for tests).
  std::map<std::int32_t, std::string> token_texts;
  bool rerank = false;  // a reranker: Qwen3's architecture with a two-output classifier, rank pooling
  // llama.context_length: what servers take as the trained context (llama-server caps a slot's
  // context to it, so comparisons with longer rooms need a model that says more).
  std::int32_t context_length = 4096;
  // Oracle only: the share of tokens t whose greedy next token is t + 1 (oracle_agrees in
  // tools/oracle/oracle.h); for the
  // others it is another token's successor. A draft for an oracle target that agrees with it on
  // that share of tokens, deterministically per token id (speculative decoding's benchmarks).
  double agree = 1.0;
};

Status write_model(const MkModelOptions& options);

// A GGUF of F32 tensors: `g`'s header (its tensors added), then tensor i's data as fill(i, data) gives it.
Status write_gguf_f32(const std::string& path, gguf_context* g, std::size_t n_tensors,
                      const std::function<void(std::size_t i, std::vector<float>& data)>& fill);

// A vision projector for a text model of width n_embd_text (tools/mkmodel_projector.cc): a LLaVA
// MLP projector over a small ViT, as llama.cpp's libmtmd loads (--mmproj). An image becomes
// (image_size / patch_size)^2 embeddings.
struct ProjectorShape {
  std::int32_t image_size = 64;
  std::int32_t patch_size = 16;
  std::int32_t n_embd = 64;
  std::int32_t n_head = 4;
  std::int32_t n_ff = 128;
  std::int32_t n_layer = 2;   // the last block is not used (LLaVA reads the one before)
  std::int32_t n_mm = 128;    // the projector's hidden width
};
// Presets: tiny, vit-b (ViT-B/16 at 224 px), clip-l (CLIP ViT-L/14 at 336 px, LLaVA-1.5's); the
// projector's hidden width is the text model's. False for an unknown name.
bool find_projector_preset(const std::string& name, std::int32_t n_embd_text, ProjectorShape* out);
Status write_projector(const ProjectorShape& shape, std::int32_t n_embd_text, std::uint64_t seed, const std::string& path);

}  // namespace uma
