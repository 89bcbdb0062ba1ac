#include "store/manifest.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include "ggml.h"
#include "gguf.h"

namespace uma::store {
namespace {

using json = nlohmann::json;

struct GgufFree {
  void operator()(gguf_context* c) const { gguf_free(c); }
};

std::size_t scalar_size(gguf_type t) {
  switch (t) {
    case GGUF_TYPE_UINT8: case GGUF_TYPE_INT8: case GGUF_TYPE_BOOL: return 1;
    case GGUF_TYPE_UINT16: case GGUF_TYPE_INT16: return 2;
    case GGUF_TYPE_UINT32: case GGUF_TYPE_INT32: case GGUF_TYPE_FLOAT32: return 4;
    case GGUF_TYPE_UINT64: case GGUF_TYPE_INT64: case GGUF_TYPE_FLOAT64: return 8;
    default: return 0;
  }
}

// One key's value as bytes for the vocabulary hash: its type tag, then the value (arrays: element
// type, count, then each element; strings with their length, so ["ab","c"] != ["a","bc"]).
void hash_kv(Sha256& h, const gguf_context* g, std::int64_t k) {
  const std::string key = gguf_get_key(g, k);
  const auto type = gguf_get_kv_type(g, k);
  const std::uint64_t klen = key.size();
  h.update({reinterpret_cast<const std::uint8_t*>(&klen), sizeof klen});
  h.update(key);
  const auto put_u64 = [&](std::uint64_t v) { h.update({reinterpret_cast<const std::uint8_t*>(&v), sizeof v}); };
  put_u64(static_cast<std::uint64_t>(type));
  if (type == GGUF_TYPE_STRING) {
    const std::string v = gguf_get_val_str(g, k);
    put_u64(v.size());
    h.update(v);
  } else if (type == GGUF_TYPE_ARRAY) {
    const auto at = gguf_get_arr_type(g, k);
    const std::size_t n = gguf_get_arr_n(g, k);
    put_u64(static_cast<std::uint64_t>(at));
    put_u64(n);
    if (at == GGUF_TYPE_STRING) {
      for (std::size_t i = 0; i < n; ++i) {
        const std::string v = gguf_get_arr_str(g, k, i);
        put_u64(v.size());
        h.update(v);
      }
    } else if (at != GGUF_TYPE_ARRAY) {
      const auto* p = static_cast<const std::uint8_t*>(gguf_get_arr_data(g, k));
      h.update(std::span<const std::uint8_t>(p, n * scalar_size(at)));
    }
  } else {
    const auto* p = static_cast<const std::uint8_t*>(gguf_get_val_data(g, k));
    h.update(std::span<const std::uint8_t>(p, scalar_size(type)));
  }
}

std::string vocab_hash_of(const gguf_context* g) {
  Sha256 vocab;
  for (std::int64_t k = 0; k < gguf_get_n_kv(g); ++k) {
    if (std::string_view(gguf_get_key(g, k)).starts_with("tokenizer.")) hash_kv(vocab, g, k);
  }
  return to_hex(vocab.finish());
}

Status hash_chunks(const std::string& path, Manifest& m, int threads) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {ErrorCode::kIo, path + ": " + std::strerror(errno)};
  std::atomic<std::size_t> next{0};
  std::atomic<bool> failed{false};
  const auto work = [&] {
    std::vector<std::uint8_t> buf(m.chunk_bytes);
    for (std::size_t i = next++; i < m.chunks.size() && !failed; i = next++) {
      const std::uint64_t size = m.chunk_size(i);
      std::uint64_t got = 0;
      while (got < size) {
        const ssize_t n = ::pread(fd, buf.data() + got, size - got, static_cast<off_t>(m.chunk_offset(i) + got));
        if (n <= 0) {
          if (n < 0 && errno == EINTR) continue;
          failed = true;
          return;
        }
        got += static_cast<std::uint64_t>(n);
      }
      m.chunks[i] = sha256({buf.data(), size});
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < std::max(1, threads); ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  ::close(fd);
  if (failed) return {ErrorCode::kIo, path + ": short read while hashing (was the file changed?)"};
  return {};
}

}  // namespace

std::uint64_t Manifest::chunk_size(std::size_t i) const {
  const std::uint64_t off = chunk_offset(i);
  return off >= bytes ? 0 : std::min(chunk_bytes, bytes - off);
}

Status Manifest::verify_chunk(std::size_t i, std::span<const std::uint8_t> data) const {
  if (i >= chunks.size()) return {ErrorCode::kInternal, "chunk " + std::to_string(i) + " is past the manifest"};
  if (data.size() != chunk_size(i)) {
    return {ErrorCode::kIo, id + ": chunk " + std::to_string(i) + " has " + std::to_string(data.size()) +
                                " bytes, the manifest says " + std::to_string(chunk_size(i))};
  }
  if (sha256(data) != chunks[i]) {
    return {ErrorCode::kIo, id + ": chunk " + std::to_string(i) + " does not match its sha256 (corrupt)"};
  }
  return {};
}

const TensorEntry* Manifest::tensor(std::string_view name) const {
  for (const TensorEntry& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

Status build_manifest(const std::string& path, const std::string& id, std::uint64_t chunk_bytes, int threads,
                      Manifest* out) {
  if (chunk_bytes == 0 || chunk_bytes % kChunkAlign != 0) {
    return {ErrorCode::kInvalidArgument, "chunk size must be a positive multiple of 4096"};
  }
  gguf_init_params params{/*no_alloc=*/true, /*ctx=*/nullptr};
  std::unique_ptr<gguf_context, GgufFree> g(gguf_init_from_file(path.c_str(), params));
  if (!g) return {ErrorCode::kModelLoad, path + ": not a GGUF file llama.cpp can read"};
  Manifest m;
  m.id = id;
  m.chunk_bytes = chunk_bytes;
  {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return {ErrorCode::kIo, path + ": " + std::strerror(errno)};
    const off_t end = ::lseek(fd, 0, SEEK_END);
    ::close(fd);
    if (end <= 0) return {ErrorCode::kIo, path + ": empty"};
    m.bytes = static_cast<std::uint64_t>(end);
  }
  m.data_offset = gguf_get_data_offset(g.get());
  const std::int64_t nt = gguf_get_n_tensors(g.get());
  for (std::int64_t t = 0; t < nt; ++t) {
    TensorEntry e;
    e.name = gguf_get_tensor_name(g.get(), t);
    e.type = ggml_type_name(gguf_get_tensor_type(g.get(), t));
    e.offset = m.data_offset + gguf_get_tensor_offset(g.get(), t);
    e.size = gguf_get_tensor_size(g.get(), t);
    if (e.offset + e.size > m.bytes) return {ErrorCode::kModelLoad, path + ": tensor " + e.name + " lies past the file's end"};
    m.tensors.push_back(std::move(e));
  }
  m.vocab_hash = vocab_hash_of(g.get());
  m.chunks.resize(m.bytes / chunk_bytes + (m.bytes % chunk_bytes != 0));
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (Status s = hash_chunks(path, m, threads); !s.ok()) return s;
  *out = std::move(m);
  return {};
}

Status vocab_gguf(const std::string& path, std::string* gguf, std::string* vocab_hash) {
  gguf_init_params params{/*no_alloc=*/true, /*ctx=*/nullptr};
  std::unique_ptr<gguf_context, GgufFree> g(gguf_init_from_file(path.c_str(), params));
  if (!g) return {ErrorCode::kModelLoad, path + ": not a GGUF file llama.cpp can read"};
  std::unique_ptr<gguf_context, GgufFree> meta(gguf_init_empty());
  gguf_set_kv(meta.get(), g.get());
  gguf->resize(gguf_get_meta_size(meta.get()));
  gguf_get_meta_data(meta.get(), gguf->data());
  *vocab_hash = vocab_hash_of(g.get());
  return {};
}

std::string encode_manifest(const Manifest& m) {
  json chunks = json::array();
  for (const Digest& d : m.chunks) chunks.push_back(to_hex(d));
  json tensors = json::array();
  for (const TensorEntry& t : m.tensors) tensors.push_back({t.name, t.type, t.offset, t.size});
  return json{{"id", m.id},
              {"bytes", m.bytes},
              {"chunk_bytes", m.chunk_bytes},
              {"data_offset", m.data_offset},
              {"vocab_hash", m.vocab_hash},
              {"chunks", std::move(chunks)},
              {"tensors", std::move(tensors)}}
      .dump();
}

Status decode_manifest(std::string_view text, Manifest* out) {
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return {ErrorCode::kInvalidJson, "manifest: not a JSON object"};
  const auto bad = [](const char* field) { return Status(ErrorCode::kBadRequest, std::string("manifest: bad field '") + field + "'", field); };
  const auto u64 = [&](const char* f, std::uint64_t* v) {
    auto it = j.find(f);
    if (it == j.end() || !it->is_number_unsigned()) return false;
    *v = it->get<std::uint64_t>();
    return true;
  };
  const auto str = [&](const char* f, std::string* v) {
    auto it = j.find(f);
    if (it == j.end() || !it->is_string()) return false;
    *v = it->get<std::string>();
    return true;
  };
  Manifest m;
  if (!str("id", &m.id) || m.id.empty()) return bad("id");
  if (!u64("bytes", &m.bytes) || m.bytes == 0 || m.bytes > kMaxModelBytes) return bad("bytes");
  if (!u64("chunk_bytes", &m.chunk_bytes) || m.chunk_bytes == 0 || m.chunk_bytes % kChunkAlign != 0) return bad("chunk_bytes");
  if (!u64("data_offset", &m.data_offset) || m.data_offset > m.bytes) return bad("data_offset");
  if (!str("vocab_hash", &m.vocab_hash)) return bad("vocab_hash");
  auto ch = j.find("chunks");
  if (ch == j.end() || !ch->is_array() || ch->size() != m.bytes / m.chunk_bytes + (m.bytes % m.chunk_bytes != 0)) return bad("chunks");
  for (const json& c : *ch) {
    Digest d;
    if (!c.is_string() || !from_hex(c.get_ref<const std::string&>(), &d)) return bad("chunks");
    m.chunks.push_back(d);
  }
  auto ts = j.find("tensors");
  if (ts == j.end() || !ts->is_array()) return bad("tensors");
  for (const json& t : *ts) {
    if (!t.is_array() || t.size() != 4 || !t[0].is_string() || !t[1].is_string() || !t[2].is_number_unsigned() ||
        !t[3].is_number_unsigned()) {
      return bad("tensors");
    }
    TensorEntry e{t[0].get<std::string>(), t[1].get<std::string>(), t[2].get<std::uint64_t>(), t[3].get<std::uint64_t>()};
    if (e.offset < m.data_offset || e.offset > m.bytes || e.size > m.bytes - e.offset) return bad("tensors");
    m.tensors.push_back(std::move(e));
  }
  *out = std::move(m);
  return {};
}

}  // namespace uma::store
