// ImageEncoder: a prompt with images made ready for the scheduler, through llama.cpp's libmtmd and
// a vision projector (--mmproj). The prompt's text holds one image marker (kImageMarker) per image;
// prepare() tokenizes the text around them, decodes each image (PNG, JPEG, GIF, BMP), runs the
// projector's encoder and gives its embeddings as a PromptImage at its place among the tokens.
// The tokens there are stand-ins derived from the image's SHA-256 (serve/request.h says why).
//
// An image seen again (a conversation's later turns send its earlier images again) is not encoded
// again: the embeddings of the last images, by content hash, stay within `cache_bytes` (LRU).
//
// Projectors whose images need other than one position per embedding (M-RoPE) or attention that
// is not causal are refused at open(): the scheduler prefills an image in chunks like text.
//
// Thread-safety: prepare() from any thread (the prepare stage's); encodes run one at a time.
// Lifetime: within the LlamaRuntime whose model it was opened for.
#pragma once

#include <list>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "serve/request.h"
#include "serve/token.h"

struct llama_model;
struct mtmd_context;
struct mtmd_input_chunk;

namespace uma {

struct ImageEncoderOptions {
  std::string mmproj_path;
  std::int32_t threads = 1;
  bool use_gpu = false;
  std::size_t cache_bytes = std::size_t{256} << 20;  // embeddings of recent images kept (0: none)
};

class ImageEncoder {
 public:
  static std::unique_ptr<ImageEncoder> open(const ImageEncoderOptions& options, const llama_model* model, Status* status);
  ~ImageEncoder();
  ImageEncoder(const ImageEncoder&) = delete;
  ImageEncoder& operator=(const ImageEncoder&) = delete;

  // `text` with one kImageMarker per image (the BOS added as the model wants, control tokens parsed
  // when parse_special). kBadRequest for an image that does not decode or a marker count that
  // does not match the images; kInternal when the encoder fails.
  Status prepare(std::string_view text, bool parse_special, const std::vector<std::string>& images,
                 std::vector<Token>* tokens, std::vector<PromptImage>* placed);
  // The tokens prepare() would make, images of these sizes (width, height) in their places, without
  // decoding or encoding an image (Anthropic's count_tokens).
  Status count(std::string_view text, bool parse_special, const std::vector<std::pair<std::int64_t, std::int64_t>>& sizes,
               std::int32_t* n) const;
  std::int32_t n_embd() const { return n_embd_; }
  struct Counts {
    std::uint64_t encoded = 0, cache_hits = 0;
    std::size_t cached_bytes = 0;
  };
  Counts counts() const;

 private:
  using Embeddings = std::shared_ptr<const std::vector<float>>;
  explicit ImageEncoder(std::size_t cache_bytes) : cache_bytes_(cache_bytes) {}
  Status embeddings_of(const mtmd_input_chunk* chunk, std::int32_t n, Embeddings* out);
  Embeddings cached(const std::string& id);
  void keep(const std::string& id, const Embeddings& e);

  mtmd_context* ctx_ = nullptr;
  std::int32_t n_embd_ = 0;
  std::mutex encode_mu_;  // one encode at a time: the projector's context is not reentrant
  // The cache of recent images' embeddings, most recent first; guarded by cache_mu_.
  mutable std::mutex cache_mu_;
  const std::size_t cache_bytes_;
  std::size_t cached_bytes_ = 0;
  std::list<std::pair<std::string, Embeddings>> recent_;
  std::unordered_map<std::string, std::list<std::pair<std::string, Embeddings>>::iterator> by_id_;
  std::uint64_t encoded_ = 0, hits_ = 0;
};

}  // namespace uma
