// Manifest: a model checkpoint's index: what a GGUF file must be, byte for
// byte, and where each tensor lies in it. Every byte the loader puts into host memory, the NVMe
// tier or a GPU is checked against it, chunk by chunk, before it is used.
//
//   id           the catalog's name for the model
//   bytes        the file's size
//   chunk_bytes  the unit of transfer and verification (a multiple of 4096: O_DIRECT reads, HTTP
//                Range requests and hashes all cut the file at the same places); the last chunk
//                may be shorter
//   chunks       sha256 of each chunk, in order
//   data_offset  where the GGUF's tensor data begins (the metadata and tensor infos lie before it)
//   tensors      name, ggml type name, absolute file offset and size of every tensor
//   vocab_hash   sha256 over the tokenizer's metadata (every `tokenizer.*` key and value): two
//                models with the same vocab_hash tokenize alike (a gateway's vocabulary cache key)
//
// Encoded as JSON (encode_manifest / decode_manifest, the one place the format lives); decoding
// checks every field and the chunk arithmetic (the text comes from Redis or a file anyone may
// have written).
// Thread-safety: a Manifest is an immutable value once built; share it as shared_ptr<const>.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "store/sha256.h"

namespace uma::store {

inline constexpr std::uint64_t kChunkAlign = 4096;
inline constexpr std::uint64_t kDefaultChunkBytes = 8ull << 20;
// A decoded manifest claiming more is refused: it would make an agent allocate that much.
inline constexpr std::uint64_t kMaxModelBytes = 1ull << 40;

struct TensorEntry {
  std::string name;
  std::string type;  // ggml type name ("f32", "q8_0", ...)
  std::uint64_t offset = 0;  // absolute, in the file
  std::uint64_t size = 0;
};

struct Manifest {
  std::string id;
  std::uint64_t bytes = 0;
  std::uint64_t chunk_bytes = kDefaultChunkBytes;
  std::vector<Digest> chunks;
  std::uint64_t data_offset = 0;
  std::vector<TensorEntry> tensors;
  std::string vocab_hash;

  std::size_t chunk_count() const { return chunks.size(); }
  std::uint64_t chunk_offset(std::size_t i) const { return i * chunk_bytes; }
  std::uint64_t chunk_size(std::size_t i) const;
  // The chunks [first, last] that hold the byte range [offset, offset + size).
  std::size_t first_chunk(std::uint64_t offset) const { return offset / chunk_bytes; }
  std::size_t last_chunk(std::uint64_t offset, std::uint64_t size) const {
    return size == 0 ? first_chunk(offset) : (offset + size - 1) / chunk_bytes;
  }
  // kIo naming the chunk when `bytes` is not chunk i as the manifest says it is.
  Status verify_chunk(std::size_t i, std::span<const std::uint8_t> bytes) const;
  const TensorEntry* tensor(std::string_view name) const;
};

// Reads the GGUF at `path` (its metadata through ggml's gguf reader, then every byte for the
// chunk hashes, hashed on `threads` threads, 0: all) into a manifest named `id`.
Status build_manifest(const std::string& path, const std::string& id, std::uint64_t chunk_bytes, int threads,
                      Manifest* out);

// The GGUF at `path` reduced to its metadata (every key and value, no tensors): what a
// vocabulary-only load reads (a gateway's tokenizer and chat template: kilobytes to megabytes, not
// the weights), with its vocab hash (as build_manifest computes it).
Status vocab_gguf(const std::string& path, std::string* gguf, std::string* vocab_hash);

std::string encode_manifest(const Manifest& m);
// kInvalidJson / kBadRequest naming the field.
Status decode_manifest(std::string_view json_text, Manifest* out);

}  // namespace uma::store
