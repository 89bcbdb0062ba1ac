// A LLaVA-style vision projector (clip.projector_type "mlp") with seeded random weights, in the GGUF
// layout llama.cpp's libmtmd reads: a ViT (patch embedding, learned positions, pre-norm blocks of
// attention and a GELU MLP) whose second-to-last block feeds a two-layer projector into the text
// model's embedding width. Random weights cost what trained ones of the shape cost, and distinct
// images give distinct embeddings, which is what serving tests need.
#include <ggml.h>
#include <gguf.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "tools/mkmodel.h"

namespace uma {
namespace {

struct ProjectorGgufFree { void operator()(gguf_context* c) const { gguf_free(c); } };
struct ProjectorGgmlFree { void operator()(ggml_context* c) const { ggml_free(c); } };

struct ProjectorTensor {
  std::string name;
  std::vector<std::int64_t> ne;
  float scale;  // uniform in [-scale, scale); 0 writes ones (norm weights), -1 zeros (biases)
};

std::vector<ProjectorTensor> projector_tensors(const ProjectorShape& p, std::int32_t n_embd_text) {
  const std::int64_t d = p.n_embd, ff = p.n_ff, n_pos = (p.image_size / p.patch_size) * (p.image_size / p.patch_size);
  std::vector<ProjectorTensor> t;
  t.push_back({"v.patch_embd.weight", {p.patch_size, p.patch_size, 3, d}, 0.05f});
  t.push_back({"v.position_embd.weight", {d, n_pos}, 0.05f});
  for (int i = 0; i < p.n_layer; ++i) {
    const std::string b = "v.blk." + std::to_string(i) + ".";
    t.push_back({b + "ln1.weight", {d}, 0.0f});
    t.push_back({b + "ln1.bias", {d}, -1.0f});
    for (const char* w : {"attn_q", "attn_k", "attn_v", "attn_out"}) t.push_back({b + w + ".weight", {d, d}, 0.05f});
    t.push_back({b + "ln2.weight", {d}, 0.0f});
    t.push_back({b + "ln2.bias", {d}, -1.0f});
    t.push_back({b + "ffn_up.weight", {d, ff}, 0.05f});
    t.push_back({b + "ffn_down.weight", {ff, d}, 0.05f});
  }
  t.push_back({"mm.0.weight", {d, p.n_mm}, 0.1f});
  t.push_back({"mm.0.bias", {p.n_mm}, -1.0f});
  t.push_back({"mm.2.weight", {p.n_mm, n_embd_text}, 0.1f});
  t.push_back({"mm.2.bias", {n_embd_text}, -1.0f});
  return t;
}

void set_projector_hparams(gguf_context* g, const ProjectorShape& p, std::int32_t n_embd_text) {
  gguf_set_val_str(g, "general.architecture", "clip");
  gguf_set_val_str(g, "general.name", "uma-projector");
  gguf_set_val_u32(g, "general.file_type", 0);
  gguf_set_val_str(g, "clip.projector_type", "mlp");
  gguf_set_val_bool(g, "clip.has_vision_encoder", true);
  gguf_set_val_bool(g, "clip.use_gelu", true);
  gguf_set_val_u32(g, "clip.vision.embedding_length", static_cast<std::uint32_t>(p.n_embd));
  gguf_set_val_u32(g, "clip.vision.feed_forward_length", static_cast<std::uint32_t>(p.n_ff));
  gguf_set_val_u32(g, "clip.vision.block_count", static_cast<std::uint32_t>(p.n_layer));
  gguf_set_val_u32(g, "clip.vision.attention.head_count", static_cast<std::uint32_t>(p.n_head));
  gguf_set_val_f32(g, "clip.vision.attention.layer_norm_epsilon", 1e-5f);
  gguf_set_val_u32(g, "clip.vision.projection_dim", static_cast<std::uint32_t>(n_embd_text));
  gguf_set_val_u32(g, "clip.vision.image_size", static_cast<std::uint32_t>(p.image_size));
  gguf_set_val_u32(g, "clip.vision.patch_size", static_cast<std::uint32_t>(p.patch_size));
  const float mean[3] = {0.5f, 0.5f, 0.5f}, stdev[3] = {0.5f, 0.5f, 0.5f};
  gguf_set_arr_data(g, "clip.vision.image_mean", GGUF_TYPE_FLOAT32, mean, 3);
  gguf_set_arr_data(g, "clip.vision.image_std", GGUF_TYPE_FLOAT32, stdev, 3);
}

}  // namespace

bool find_projector_preset(const std::string& name, std::int32_t n_embd_text, ProjectorShape* out) {
  if (name == "tiny") *out = ProjectorShape{};
  else if (name == "vit-b") *out = ProjectorShape{224, 16, 768, 12, 3072, 12, n_embd_text};
  else if (name == "clip-l") *out = ProjectorShape{336, 14, 1024, 16, 4096, 24, n_embd_text};
  else return false;
  return true;
}

Status write_projector(const ProjectorShape& p, std::int32_t n_embd_text, std::uint64_t seed, const std::string& path) {
  if (p.patch_size <= 0 || p.image_size % p.patch_size != 0 || p.n_head <= 0 || p.n_embd % p.n_head != 0 || p.n_layer < 2) {
    return Status(ErrorCode::kInvalidArgument, "projector shape: image size a multiple of the patch, width of the heads, 2+ blocks");
  }
  std::unique_ptr<gguf_context, ProjectorGgufFree> g(gguf_init_empty());
  set_projector_hparams(g.get(), p, n_embd_text);
  const std::vector<ProjectorTensor> plan = projector_tensors(p, n_embd_text);
  ggml_init_params ip{ggml_tensor_overhead() * (plan.size() + 1), nullptr, /*no_alloc=*/true};
  std::unique_ptr<ggml_context, ProjectorGgmlFree> meta(ggml_init(ip));
  for (const ProjectorTensor& t : plan) {
    ggml_tensor* x = ggml_new_tensor(meta.get(), GGML_TYPE_F32, static_cast<int>(t.ne.size()), t.ne.data());
    ggml_set_name(x, t.name.c_str());
    gguf_add_tensor(g.get(), x);
  }
  std::mt19937_64 rng(seed ^ 0x9e3779b97f4a7c15ull);
  return write_gguf_f32(path, g.get(), plan.size(), [&](std::size_t i, std::vector<float>& data) {
    const ProjectorTensor& t = plan[i];
    std::int64_t n = 1;
    for (std::int64_t e : t.ne) n *= e;
    data.assign(static_cast<std::size_t>(n), t.scale == 0.0f ? 1.0f : 0.0f);
    if (t.scale > 0.0f) {  // from the raw bits: the same bytes whatever the standard library
      for (float& x : data) x = static_cast<float>((static_cast<double>(rng() >> 40) / 8388608.0 - 1.0) * t.scale);
    }
  });
}

}  // namespace uma
