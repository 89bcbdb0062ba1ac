#include "runtime/image_encoder.h"

#include <llama.h>
#include <mtmd-helper.h>
#include <mtmd.h>
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <cstring>
#include <string_view>


namespace uma {
namespace {

struct ChunksFree { void operator()(mtmd_input_chunks* c) const { mtmd_input_chunks_free(c); } };
struct BitmapFree { void operator()(mtmd_bitmap* b) const { mtmd_bitmap_free(b); } };

// Stand-in token ids for an image's positions: negative (never in a vocabulary), from its hash.
Token stand_in(std::uint64_t hash, std::int32_t i) {
  const std::uint64_t mixed = (hash + static_cast<std::uint64_t>(i) * 0x9E3779B97F4A7C15ull) * 0xBF58476D1CE4E5B9ull;
  return -2 - static_cast<Token>(mixed >> 35);  // in [-2 - 2^29, -2]
}

std::uint64_t hash_of_id(const char* id) {  // the bitmap's id: its bytes' SHA-256 in hex
  std::uint64_t h = 1469598103934665603ull;
  for (const char* c = id; c != nullptr && *c != '\0'; ++c) h = (h ^ static_cast<unsigned char>(*c)) * 1099511628211ull;
  return h;
}

// A prompt's text as libmtmd takes it: the BOS as the model wants, control tokens when asked.
mtmd_input_text input_of(std::string_view text, bool parse_special) {
  mtmd_input_text input{};
  input.text = text.data();
  input.text_len = text.size();
  input.add_special = true;
  input.parse_special = parse_special;
  return input;
}

// libmtmd's lines into our log: errors and warnings as they are, its loader's chatter at trace.
void log_from_mtmd(ggml_log_level level, const char* text, void*) {
  std::string_view line(text);
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.remove_suffix(1);
  if (line.empty()) return;
  if (level == GGML_LOG_LEVEL_ERROR) spdlog::error("mtmd: {}", line);
  else if (level == GGML_LOG_LEVEL_WARN) spdlog::warn("mtmd: {}", line);
  else spdlog::trace("mtmd: {}", line);
}

}  // namespace

std::unique_ptr<ImageEncoder> ImageEncoder::open(const ImageEncoderOptions& options, const llama_model* model, Status* status) {
  mtmd_helper_log_set(log_from_mtmd, nullptr);
  mtmd_context_params p = mtmd_context_params_default();
  p.use_gpu = options.use_gpu;
  p.n_threads = options.threads;
  p.print_timings = false;
  p.media_marker = kImageMarker.data();
  p.warmup = true;
  std::unique_ptr<ImageEncoder> e(new ImageEncoder(options.cache_bytes));
  e->ctx_ = mtmd_init_from_file(options.mmproj_path.c_str(), model, p);
  if (e->ctx_ == nullptr) {
    *status = Status(ErrorCode::kInvalidArgument, "cannot load the vision projector '" + options.mmproj_path +
                     "' (llama.cpp's log says why: a file that is no projector, or one for a model of another width)");
    return nullptr;
  }
  if (!mtmd_support_vision(e->ctx_)) {
    *status = Status(ErrorCode::kInvalidArgument, "'" + options.mmproj_path + "' has no vision encoder");
    return nullptr;
  }
  if (mtmd_decode_use_mrope(e->ctx_)) {
    *status = Status(ErrorCode::kInvalidArgument, "'" + options.mmproj_path + "' places images with M-RoPE, which umad "
                     "does not serve (one position per embedding only)");
    return nullptr;
  }
  e->n_embd_ = llama_model_n_embd_inp(model);
  return e;
}

ImageEncoder::~ImageEncoder() {
  if (ctx_ != nullptr) mtmd_free(ctx_);
}

Status ImageEncoder::prepare(std::string_view text, bool parse_special, const std::vector<std::string>& images,
                             std::vector<Token>* tokens, std::vector<PromptImage>* placed) {
  std::vector<std::unique_ptr<mtmd_bitmap, BitmapFree>> bitmaps;
  std::vector<const mtmd_bitmap*> views;
  for (std::size_t i = 0; i < images.size(); ++i) {
    const auto* data = reinterpret_cast<const unsigned char*>(images[i].data());
    mtmd_helper_bitmap_wrapper w = mtmd_helper_bitmap_init_from_buf(ctx_, data, images[i].size(), false,
                                                                    mtmd_helper_init_opt_default());
    if (w.bitmap == nullptr || mtmd_bitmap_is_audio(w.bitmap)) {
      if (w.bitmap != nullptr) mtmd_bitmap_free(w.bitmap);
      return Status(ErrorCode::kBadRequest, "image " + std::to_string(i + 1) + " does not decode as an image", "image");
    }
    bitmaps.emplace_back(w.bitmap);
    views.push_back(w.bitmap);
  }
  const mtmd_input_text input = input_of(text, parse_special);
  std::unique_ptr<mtmd_input_chunks, ChunksFree> chunks(mtmd_input_chunks_init());
  const int32_t rc = mtmd_tokenize(ctx_, chunks.get(), &input, views.data(), views.size());
  if (rc == 1) {
    return Status(ErrorCode::kBadRequest, "the prompt has " + std::to_string(images.size()) + " image(s) but another "
                  "number of image places (" + std::string(kImageMarker) + " in its text)", "image");
  }
  if (rc != 0) return Status(ErrorCode::kBadRequest, "an image could not be prepared for the projector", "image");
  tokens->clear();
  placed->clear();
  for (std::size_t c = 0; c < mtmd_input_chunks_size(chunks.get()); ++c) {
    const mtmd_input_chunk* chunk = mtmd_input_chunks_get(chunks.get(), c);
    if (mtmd_input_chunk_get_type(chunk) == MTMD_INPUT_CHUNK_TYPE_TEXT) {
      std::size_t n = 0;
      const llama_token* t = mtmd_input_chunk_get_tokens_text(chunk, &n);
      tokens->insert(tokens->end(), t, t + n);
      continue;
    }
    if (mtmd_decode_use_non_causal(ctx_, chunk)) {
      return Status(ErrorCode::kNotSupported, "this projector's images need non-causal attention, which umad does not serve", "image");
    }
    const auto n = static_cast<std::int32_t>(mtmd_input_chunk_get_n_tokens(chunk));
    Embeddings embd;
    if (Status st = embeddings_of(chunk, n, &embd); !st.ok()) return st;
    const std::uint64_t h = hash_of_id(mtmd_input_chunk_get_id(chunk));
    const auto pos = static_cast<std::int32_t>(tokens->size());
    for (std::int32_t i = 0; i < n; ++i) tokens->push_back(stand_in(h, i));
    placed->push_back(PromptImage{pos, n, std::move(embd)});
  }
  return Status::Ok();
}

Status ImageEncoder::count(std::string_view text, bool parse_special,
                           const std::vector<std::pair<std::int64_t, std::int64_t>>& sizes, std::int32_t* n) const {
  std::vector<std::unique_ptr<mtmd_bitmap, BitmapFree>> bitmaps;
  std::vector<const mtmd_bitmap*> views;
  for (const auto& [w, h] : sizes) {  // placeholders: a size, no pixels
    bitmaps.emplace_back(mtmd_bitmap_init(static_cast<uint32_t>(w), static_cast<uint32_t>(h), nullptr));
    views.push_back(bitmaps.back().get());
  }
  const mtmd_input_text input = input_of(text, parse_special);
  std::unique_ptr<mtmd_input_chunks, ChunksFree> chunks(mtmd_input_chunks_init());
  if (mtmd_tokenize(ctx_, chunks.get(), &input, views.data(), views.size()) != 0) {
    return Status(ErrorCode::kBadRequest, "the prompt's image places (" + std::string(kImageMarker) + ") do not match its images", "image");
  }
  *n = static_cast<std::int32_t>(mtmd_helper_get_n_tokens(chunks.get()));
  return Status::Ok();
}

Status ImageEncoder::embeddings_of(const mtmd_input_chunk* chunk, std::int32_t n, Embeddings* out) {
  const char* id = mtmd_input_chunk_get_id(chunk);
  const std::string key = id != nullptr ? id : "";
  if (!key.empty() && (*out = cached(key))) return Status::Ok();
  auto embd = std::make_shared<std::vector<float>>(static_cast<std::size_t>(n) * static_cast<std::size_t>(n_embd_));
  {
    std::lock_guard<std::mutex> lock(encode_mu_);
    if (mtmd_encode_chunk(ctx_, chunk) != 0) return Status(ErrorCode::kInternal, "the vision projector failed to encode an image");
    std::memcpy(embd->data(), mtmd_get_output_embd(ctx_), embd->size() * sizeof(float));
  }
  *out = std::move(embd);
  keep(key, *out);
  return Status::Ok();
}

ImageEncoder::Embeddings ImageEncoder::cached(const std::string& id) {
  std::lock_guard<std::mutex> lock(cache_mu_);
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return nullptr;
  recent_.splice(recent_.begin(), recent_, it->second);
  ++hits_;
  return it->second->second;
}

void ImageEncoder::keep(const std::string& id, const Embeddings& e) {
  const std::size_t bytes = e->size() * sizeof(float);
  std::lock_guard<std::mutex> lock(cache_mu_);
  ++encoded_;
  if (id.empty() || bytes > cache_bytes_ || by_id_.count(id) != 0) return;
  while (cached_bytes_ + bytes > cache_bytes_ && !recent_.empty()) {
    cached_bytes_ -= recent_.back().second->size() * sizeof(float);
    by_id_.erase(recent_.back().first);
    recent_.pop_back();
  }
  recent_.emplace_front(id, e);
  by_id_[id] = recent_.begin();
  cached_bytes_ += bytes;
}

ImageEncoder::Counts ImageEncoder::counts() const {
  std::lock_guard<std::mutex> lock(cache_mu_);
  return {encoded_, hits_, cached_bytes_};
}

}  // namespace uma
