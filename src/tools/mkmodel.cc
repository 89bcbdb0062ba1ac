#include "tools/mkmodel.h"

#include <ggml.h>
#include <gguf.h>
#include <llama.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <vector>

#include "tools/oracle/oracle.h"

namespace uma {
namespace {


struct GgufFree { void operator()(gguf_context* c) const { gguf_free(c); } };
struct GgmlFree { void operator()(ggml_context* c) const { ggml_free(c); } };
using GgufPtr = std::unique_ptr<gguf_context, GgufFree>;
using GgmlPtr = std::unique_ptr<ggml_context, GgmlFree>;

// A stream of uniform floats in [-a, a), fixed by (seed, tensor name): independent of write order
// and of the standard library's distribution implementations.
class Uniform {
 public:
  Uniform(std::uint64_t seed, const std::string& name) {
    std::uint64_t h = 1469598103934665603ull ^ seed;
    for (unsigned char c : name) h = (h ^ c) * 1099511628211ull;
    rng_.seed(h);
  }
  float next(float a) {
    const double u = static_cast<double>(rng_() >> 40) * (1.0 / 16777216.0);  // [0, 1)
    return static_cast<float>((2.0 * u - 1.0) * a);
  }

 private:
  std::mt19937_64 rng_;
};

enum class Fill { kRandom, kOnes, kZeros, kUnitRows, kShiftedEmbedding };

struct TensorPlan {
  std::string name;
  std::int64_t ne0, ne1;  // ne1 == 0: a vector
  Fill fill;
};

// A reranker (rerank): Qwen3's architecture (its attention norms per head) with a classifier head
// of two outputs ("yes", "no"), read after rank pooling as the reranker's score.
std::vector<TensorPlan> plan_tensors(const ModelShape& s, std::int64_t n_vocab, bool rerank) {
  const std::int64_t d = s.n_embd, kv = s.n_embd / s.n_head * s.n_head_kv, ff = s.n_ff;
  const Fill out_fill = s.oracle ? Fill::kZeros : Fill::kRandom;  // attn_output, ffn_down
  std::vector<TensorPlan> t;
  t.push_back({"token_embd.weight", d, n_vocab, s.oracle ? Fill::kUnitRows : Fill::kRandom});
  for (int i = 0; i < s.n_layer; ++i) {
    const std::string b = "blk." + std::to_string(i) + ".";
    t.push_back({b + "attn_norm.weight", d, 0, Fill::kOnes});
    if (rerank) {
      t.push_back({b + "attn_q_norm.weight", d / s.n_head, 0, Fill::kOnes});
      t.push_back({b + "attn_k_norm.weight", d / s.n_head, 0, Fill::kOnes});
    }
    t.push_back({b + "attn_q.weight", d, d, Fill::kRandom});
    t.push_back({b + "attn_k.weight", d, kv, Fill::kRandom});
    t.push_back({b + "attn_v.weight", d, kv, Fill::kRandom});
    t.push_back({b + "attn_output.weight", d, d, out_fill});
    t.push_back({b + "ffn_norm.weight", d, 0, Fill::kOnes});
    t.push_back({b + "ffn_gate.weight", d, ff, Fill::kRandom});
    t.push_back({b + "ffn_up.weight", d, ff, Fill::kRandom});
    t.push_back({b + "ffn_down.weight", ff, d, out_fill});
  }
  t.push_back({"output_norm.weight", d, 0, Fill::kOnes});
  t.push_back({"output.weight", d, n_vocab, s.oracle ? Fill::kShiftedEmbedding : Fill::kRandom});
  if (rerank) t.push_back({"cls.output.weight", d, 2, Fill::kRandom});
  return t;
}

// Output row r is the embedding of src[r]: after token t the head scores row r highest where
// src[r] = t. Agreeing tokens t get row t + 1; the others are rotated among themselves (each takes
// the next disagreeing token's row), so the map stays one to one and none of them predicts t + 1.
std::vector<std::int64_t> head_sources(std::int64_t rows, double agree) {
  std::vector<std::int64_t> src(static_cast<std::size_t>(rows));
  std::vector<std::int64_t> away;
  for (std::int64_t t = 0; t < rows; ++t) {
    src[static_cast<std::size_t>((t + 1) % rows)] = t;
    if (!oracle_agrees(static_cast<std::int32_t>(t), agree)) away.push_back(t);
  }
  for (std::size_t i = 0; away.size() > 1 && i < away.size(); ++i) {
    src[static_cast<std::size_t>((away[(i + 1) % away.size()] + 1) % rows)] = away[i];
  }
  return src;
}

void fill_tensor(const TensorPlan& p, std::uint64_t seed, const std::vector<float>& embd, double agree, std::vector<float>& out) {
  const std::int64_t rows = p.ne1 == 0 ? 1 : p.ne1;
  out.assign(static_cast<size_t>(p.ne0 * rows), 0.0f);
  Uniform u(seed, p.name);
  switch (p.fill) {
    case Fill::kZeros: break;
    case Fill::kOnes: std::fill(out.begin(), out.end(), 1.0f); break;
    case Fill::kRandom:
      for (float& x : out) x = u.next(0.035f);  // std 0.02, the usual init scale
      break;
    case Fill::kUnitRows:
      for (std::int64_t r = 0; r < rows; ++r) {
        float* row = out.data() + r * p.ne0;
        double norm = 0;
        for (std::int64_t k = 0; k < p.ne0; ++k) {
          row[k] = u.next(1.0f);
          norm += double(row[k]) * row[k];
        }
        const float inv = static_cast<float>(1.0 / std::sqrt(norm));
        for (std::int64_t k = 0; k < p.ne0; ++k) row[k] *= inv;
      }
      break;
    case Fill::kShiftedEmbedding: {  // row j scores highest for hidden state = embedding of j-1
      const std::vector<std::int64_t> src = head_sources(rows, agree);
      for (std::int64_t r = 0; r < rows; ++r) {
        std::memcpy(out.data() + r * p.ne0, embd.data() + src[static_cast<std::size_t>(r)] * p.ne0, sizeof(float) * p.ne0);
      }
      break;
    }
  }
}

void set_hparams(gguf_context* g, const ModelShape& s, std::int64_t n_vocab, std::int32_t context_length, bool rerank) {
  const std::string arch = rerank ? "qwen3" : "llama";
  const auto key = [&arch](const char* k) { return arch + "." + k; };
  gguf_set_val_str(g, "general.architecture", arch.c_str());
  gguf_set_val_str(g, "general.name", ("uma-" + s.name).c_str());
  gguf_set_val_u32(g, "general.file_type", 0);  // all F32 before quantization
  gguf_set_val_u32(g, key("context_length").c_str(), static_cast<std::uint32_t>(context_length));
  gguf_set_val_u32(g, key("embedding_length").c_str(), static_cast<uint32_t>(s.n_embd));
  gguf_set_val_u32(g, key("block_count").c_str(), static_cast<uint32_t>(s.n_layer));
  gguf_set_val_u32(g, key("feed_forward_length").c_str(), static_cast<uint32_t>(s.n_ff));
  gguf_set_val_u32(g, key("attention.head_count").c_str(), static_cast<uint32_t>(s.n_head));
  gguf_set_val_u32(g, key("attention.head_count_kv").c_str(), static_cast<uint32_t>(s.n_head_kv));
  gguf_set_val_u32(g, key("rope.dimension_count").c_str(), static_cast<uint32_t>(s.n_embd / s.n_head));
  gguf_set_val_f32(g, key("rope.freq_base").c_str(), 10000.0f);
  gguf_set_val_f32(g, key("attention.layer_norm_rms_epsilon").c_str(), 1e-5f);
  gguf_set_val_u32(g, key("vocab_size").c_str(), static_cast<uint32_t>(n_vocab));
  if (rerank) {
    gguf_set_val_u32(g, key("pooling_type").c_str(), 4);  // LLAMA_POOLING_TYPE_RANK
    const char* labels[] = {"yes", "no"};
    gguf_set_arr_str(g, key("classifier.output_labels").c_str(), labels, 2);
  }
}

// The vocabulary's tokens with `texts` in place of theirs, as user-defined tokens (text verbatim).
Status replace_token_texts(gguf_context* g, const gguf_context* vocab, const std::map<std::int32_t, std::string>& texts) {
  const int64_t words_key = gguf_find_key(vocab, "tokenizer.ggml.tokens");
  const int64_t types_key = gguf_find_key(vocab, "tokenizer.ggml.token_type");
  if (types_key < 0 || gguf_get_arr_type(vocab, types_key) != GGUF_TYPE_INT32) return Status(ErrorCode::kIo, "the vocab has no token types");
  const auto n = static_cast<std::int64_t>(gguf_get_arr_n(vocab, words_key));
  std::vector<std::string> words(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) words[static_cast<std::size_t>(i)] = gguf_get_arr_str(vocab, words_key, i);
  const auto* type_data = static_cast<const std::int32_t*>(gguf_get_arr_data(vocab, types_key));
  std::vector<std::int32_t> types(type_data, type_data + n);
  for (const auto& [id, text] : texts) {
    if (id < 0 || id >= n) return Status(ErrorCode::kBadRequest, "--token-text: no token " + std::to_string(id));
    words[static_cast<std::size_t>(id)] = text;
    types[static_cast<std::size_t>(id)] = 4;  // LLAMA_TOKEN_TYPE_USER_DEFINED
  }
  std::vector<const char*> ptrs;
  for (const std::string& w : words) ptrs.push_back(w.c_str());
  gguf_set_arr_str(g, "tokenizer.ggml.tokens", ptrs.data(), ptrs.size());
  gguf_set_arr_data(g, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, types.data(), types.size());
  return Status::Ok();
}

Status write_f32(const MkModelOptions& o, const std::string& path) {
  gguf_init_params vp{/*no_alloc=*/true, /*ctx=*/nullptr};
  GgufPtr vocab(gguf_init_from_file(o.vocab_path.c_str(), vp));
  if (!vocab) return Status(ErrorCode::kIo, "cannot read vocab '" + o.vocab_path + "'");
  const int64_t tok_key = gguf_find_key(vocab.get(), "tokenizer.ggml.tokens");
  if (tok_key < 0) return Status(ErrorCode::kIo, "'" + o.vocab_path + "' has no tokenizer");
  const auto n_vocab = static_cast<std::int64_t>(gguf_get_arr_n(vocab.get(), tok_key));

  GgufPtr g(gguf_init_empty());
  gguf_set_kv(g.get(), vocab.get());  // tokenizer.* (and the vocab file's own llama.* which we overwrite)
  set_hparams(g.get(), o.shape, n_vocab, o.context_length, o.rerank);
  if (!o.chat_template.empty()) gguf_set_val_str(g.get(), "tokenizer.chat_template", o.chat_template.c_str());
  if (o.no_bos) gguf_set_val_bool(g.get(), "tokenizer.ggml.add_bos_token", false);
  if (!o.token_texts.empty()) {
    if (Status st = replace_token_texts(g.get(), vocab.get(), o.token_texts); !st.ok()) return st;
  }
  static const char* const kFimKeys[] = {"tokenizer.ggml.fim_pre_token_id", "tokenizer.ggml.fim_suf_token_id",
                                         "tokenizer.ggml.fim_mid_token_id", "tokenizer.ggml.fim_rep_token_id",
                                         "tokenizer.ggml.fim_sep_token_id"};
  for (std::size_t i = 0; i < o.fim_tokens.size() && i < std::size(kFimKeys); ++i) {
    gguf_set_val_u32(g.get(), kFimKeys[i], static_cast<std::uint32_t>(o.fim_tokens[i]));
  }

  const std::vector<TensorPlan> plan = plan_tensors(o.shape, n_vocab, o.rerank);
  ggml_init_params ip{ggml_tensor_overhead() * (plan.size() + 1), nullptr, /*no_alloc=*/true};
  GgmlPtr meta(ggml_init(ip));
  for (const TensorPlan& p : plan) {
    ggml_tensor* t = p.ne1 == 0 ? ggml_new_tensor_1d(meta.get(), GGML_TYPE_F32, p.ne0)
                                : ggml_new_tensor_2d(meta.get(), GGML_TYPE_F32, p.ne0, p.ne1);
    ggml_set_name(t, p.name.c_str());
    gguf_add_tensor(g.get(), t);
  }

  std::vector<float> embd;
  return write_gguf_f32(path, g.get(), plan.size(), [&](std::size_t i, std::vector<float>& data) {
    fill_tensor(plan[i], o.seed, embd, o.agree, data);
    if (plan[i].fill == Fill::kUnitRows) embd = data;  // the oracle's head is built from it
  });
}

}  // namespace

Status write_gguf_f32(const std::string& path, gguf_context* g, std::size_t n_tensors,
                      const std::function<void(std::size_t, std::vector<float>&)>& fill) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return Status(ErrorCode::kIo, "cannot write '" + path + "'");
  std::vector<char> header(gguf_get_meta_size(g));
  gguf_get_meta_data(g, header.data());
  bool ok = std::fwrite(header.data(), 1, header.size(), f) == header.size();
  const size_t align = gguf_get_alignment(g);
  std::vector<float> data;
  const std::vector<char> zeros(align, 0);
  for (std::size_t i = 0; i < n_tensors && ok; ++i) {
    fill(i, data);
    const size_t bytes = data.size() * sizeof(float);
    ok = std::fwrite(data.data(), 1, bytes, f) == bytes;
    const size_t pad = GGML_PAD(bytes, align) - bytes;
    ok = ok && std::fwrite(zeros.data(), 1, pad, f) == pad;
  }
  ok = (std::fclose(f) == 0) && ok;
  return ok ? Status::Ok() : Status(ErrorCode::kIo, "short write to '" + path + "'");
}

bool find_preset(const std::string& name, ModelShape* out) {
  static const ModelShape kPresets[] = {
      {"tiny", 64, 2, 4, 2, 128, false},
      {"small", 576, 30, 9, 3, 1536, false},
      {"1b", 2048, 22, 32, 4, 5632, false},
      {"8b", 4096, 32, 32, 8, 14336, false},  // Llama 3 8B's shape (with this tool's 32k vocabulary)
      {"oracle", 256, 2, 4, 2, 512, true},
  };
  for (const ModelShape& s : kPresets) {
    if (s.name == name) {
      *out = s;
      return true;
    }
  }
  return false;
}

Status write_model(const MkModelOptions& o) {
  if (o.agree < 1.0 && !o.shape.oracle) return Status(ErrorCode::kInvalidArgument, "--agree needs an oracle (--oracle or the oracle preset)");
  llama_ftype ftype;
  if (o.type == "f32") ftype = LLAMA_FTYPE_ALL_F32;
  else if (o.type == "f16") ftype = LLAMA_FTYPE_MOSTLY_F16;
  else if (o.type == "q8_0") ftype = LLAMA_FTYPE_MOSTLY_Q8_0;
  else if (o.type == "q4_0") ftype = LLAMA_FTYPE_MOSTLY_Q4_0;
  else return Status(ErrorCode::kInvalidArgument, "unknown type '" + o.type + "' (f32, f16, q8_0, q4_0)");

  if (ftype == LLAMA_FTYPE_ALL_F32) return write_f32(o, o.out_path);
  const std::string tmp = o.out_path + ".f32.tmp";
  Status st = write_f32(o, tmp);
  if (st.ok()) {
    llama_model_quantize_params qp = llama_model_quantize_default_params();
    qp.ftype = ftype;
    qp.nthread = o.threads;
    if (llama_model_quantize(tmp.c_str(), o.out_path.c_str(), &qp) != 0) {
      st = Status(ErrorCode::kIo, "quantization to " + o.type + " failed");
    }
  }
  std::remove(tmp.c_str());
  return st;
}

}  // namespace uma
