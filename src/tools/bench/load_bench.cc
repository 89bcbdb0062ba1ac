// uma-load-bench: how fast a model gets from each tier into llama.cpp, and what the hardware
// allows (bench/load.sh runs it; docs/BENCHMARKS.md "Model loading").
//   --mode llama  --model F --load-mode mmap|direct|read   llama.cpp's own loader on the file
//   --mode store  --idx F.idx --dir D [--url U] --tier nvme|remote|dram
//                 our tiers (store/tier_store.h) streamed into llama.cpp (runtime/image_loader.h)
//   --mode memcpy --bytes N        host memory copy bandwidth (the DRAM tier's limit)
//   --mode h2d --bytes N           pinned host-to-GPU copy bandwidth (the DRAM->GPU limit)
// Each run prints one JSON line: bytes, load_s, first_token_s (load + a context + one decode, which
// touches every weight: an mmap load defers its reads to there), GB/s over the load.
#include <CLI/CLI.hpp>
#include <ggml-backend.h>
#include <llama.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/image_loader.h"
#include "runtime/llama_runtime.h"
#include "store/tier_store.h"

namespace {

using namespace uma;
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// A context and one decode of one token: the model's weights all take part.
double first_token(llama_model* model) {
  const auto t0 = Clock::now();
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = 256;
  cp.n_batch = 32;
  cp.n_ubatch = 32;
  cp.n_seq_max = 1;
  llama_context* ctx = llama_init_from_model(model, cp);
  if (!ctx) return -1;
  llama_token tok = llama_vocab_bos(llama_model_get_vocab(model));
  if (tok < 0) tok = 1;
  llama_batch b = llama_batch_get_one(&tok, 1);
  const int rc = llama_decode(ctx, b);
  llama_synchronize(ctx);
  llama_free(ctx);
  return rc == 0 ? since(t0) : -1;
}

llama_model_params model_params(int gpu_layers) {
  llama_model_params mp = llama_model_default_params();
  mp.n_gpu_layers = llama_supports_gpu_offload() ? (gpu_layers < 0 ? 999 : gpu_layers) : 0;
  return mp;
}

void report(const char* mode, const std::string& detail, std::uint64_t bytes, double load_s, double first_s,
            const std::string& extra = "") {
  std::printf("{\"mode\":\"%s\",\"detail\":\"%s\",\"bytes\":%llu,\"load_s\":%.4f,\"first_token_s\":%.4f,\"gb_s\":%.3f%s}\n", mode,
              detail.c_str(), static_cast<unsigned long long>(bytes), load_s, first_s, bytes / load_s / 1e9, extra.c_str());
  std::fflush(stdout);
}

int memcpy_bench(std::uint64_t bytes) {
  auto src = store::allocate_pageable(bytes), dst = store::allocate_pageable(bytes);
  if (!src.data || !dst.data) return 1;
  std::memset(src.data, 1, bytes);
  std::memset(dst.data, 0, bytes);  // both faulted in: the copy alone is timed
  double best = 1e9;
  for (int i = 0; i < 3; ++i) {
    const auto t0 = Clock::now();
    std::memcpy(dst.data, src.data, bytes);
    best = std::min(best, since(t0));
  }
  report("memcpy", "best of 3", bytes, best, 0);
  src.release();
  dst.release();
  return 0;
}

int h2d_bench(std::uint64_t bytes) {
  ggml_backend_dev_t gpu = nullptr;
  for (size_t i = 0; i < ggml_backend_dev_count(); ++i) {
    if (ggml_backend_dev_type(ggml_backend_dev_get(i)) == GGML_BACKEND_DEVICE_TYPE_GPU) gpu = ggml_backend_dev_get(i);
  }
  if (!gpu) {
    std::fprintf(stderr, "uma-load-bench: no GPU backend\n");
    return 2;
  }
  auto host = host_allocator_for_backend()(bytes);
  if (!host.data) return 1;
  std::memset(host.data, 1, bytes);
  ggml_init_params ip{ggml_tensor_overhead() * 2, nullptr, true};
  ggml_context* ctx = ggml_init(ip);
  ggml_tensor* t = ggml_new_tensor_1d(ctx, GGML_TYPE_I8, static_cast<int64_t>(bytes));
  ggml_backend_buffer_t buf = ggml_backend_alloc_ctx_tensors_from_buft(ctx, ggml_backend_dev_buffer_type(gpu));
  double best = 1e9;
  for (int i = 0; i < 3; ++i) {
    const auto t0 = Clock::now();
    ggml_backend_tensor_set(t, host.data, 0, bytes);
    best = std::min(best, since(t0));
  }
  report("h2d", host.pinned ? "pinned, best of 3" : "pageable, best of 3", bytes, best, 0);
  ggml_backend_buffer_free(buf);
  ggml_free(ctx);
  host.release();
  return 0;
}

// The flags as given.
struct LoadBenchFlags {
  std::string mode = "store", model, load_mode = "mmap", idx, dir, url, tier = "nvme", path = "auto";
  std::uint64_t bytes = 1ull << 30;
  int gpu_layers = -1, depth = 8, block_mb = 4, connections = 8, verify_threads = 0;
  bool prefault = false;
};

void add_flags(CLI::App& app, LoadBenchFlags& f) {
  app.add_option("--mode", f.mode, "llama | store | memcpy | h2d")->check(CLI::IsMember({"llama", "store", "memcpy", "h2d"}));
  app.add_option("--model", f.model, "GGUF file (--mode llama)");
  app.add_option("--load-mode", f.load_mode, "mmap | direct | read")->check(CLI::IsMember({"mmap", "direct", "read"}));
  app.add_option("--idx", f.idx, "the model's manifest (--mode store)");
  app.add_option("--dir", f.dir, "the NVMe tier directory");
  app.add_option("--url", f.url, "the remote tier's URL");
  app.add_option("--tier", f.tier, "nvme | remote | dram: where the bytes are when the load starts")
      ->check(CLI::IsMember({"nvme", "remote", "dram"}));
  app.add_option("--path", f.path, "auto | copy | stream | map: how an image reaches llama.cpp (runtime/image_loader.h)")
      ->check(CLI::IsMember({"auto", "copy", "stream", "map"}));
  app.add_option("--bytes", f.bytes, "--mode memcpy | h2d: bytes to copy");
  app.add_option("--gpu-layers", f.gpu_layers, "layers on the GPU (-1: all, where there is one)");
  app.add_option("--depth", f.depth, "NVMe reads in flight");
  app.add_option("--block-mb", f.block_mb, "NVMe read size");
  app.add_option("--connections", f.connections, "remote Range requests in flight");
  app.add_option("--verify-threads", f.verify_threads, "hashing threads (0: all)");
  app.add_flag("--prefault", f.prefault, "the tier's host memory pool warmed before the timed load, as in an agent that "
               "has loaded models before (a fresh page's first touch is not counted)");
}

// llama.cpp's own load of the file, and its first token.
int llama_load(const LoadBenchFlags& f, const llama_model_params& mp) {
  llama_model_params p = mp;
  p.load_mode = f.load_mode == "mmap" ? LLAMA_LOAD_MODE_MMAP : f.load_mode == "direct" ? LLAMA_LOAD_MODE_DIRECT_IO : LLAMA_LOAD_MODE_NONE;
  const auto t0 = Clock::now();
  llama_model* m = llama_model_load_from_file(f.model.c_str(), p);
  const double load = since(t0);
  if (!m) return 1;
  const double first = first_token(m);
  report("llama", f.load_mode, llama_model_size(m), load, load + first);
  llama_model_free(m);
  return 0;
}

int fail(const Status& s) {
  std::fprintf(stderr, "uma-load-bench: %s\n", s.to_string().c_str());
  return 1;
}

// What the store's fills did, as the report's JSON fields.
std::string fill_report(const store::TierStore& ts, const ImageLoadStats& ls, bool pinned, const LoadBenchFlags& f) {
  std::string extra = ",\"wait_s\":" + std::to_string(ls.wait_seconds) + ",\"copy_s\":" + std::to_string(ls.copy_seconds) +
                      ",\"tensor_s\":" + std::to_string(ls.tensor_seconds) + ",\"tensor_bytes\":" + std::to_string(ls.tensor_bytes) +
                      ",\"pinned\":" + (pinned ? "true" : "false") + ",\"path\":\"" + f.path +
                      "\",\"path_taken\":" + std::to_string(ls.path) + ",\"prefault\":" + (f.prefault ? "true" : "false");
  extra += ",\"fills\":[";
  for (const auto& r : ts.history()) {
    if (extra.back() == '}') extra += ",";
    extra += "{\"from\":\"" + std::string(store::tier_name(r.from)) + "\",\"seconds\":" + std::to_string(r.seconds) +
             ",\"corrupt\":" + std::to_string(r.corrupt_chunks) + ",\"resumed\":" + std::to_string(r.resumed_transfers) +
             ",\"direct\":" + (r.direct ? "true" : "false") + "}";
  }
  return extra + "]";
}

// The model store's load from --tier, through the image loader, and its first token.
int store_load(const LoadBenchFlags& f, const llama_model_params& mp) {
  std::ifstream in(f.idx);
  std::stringstream text;
  text << in.rdbuf();
  auto manifest = std::make_shared<store::Manifest>();
  if (Status s = store::decode_manifest(text.str(), manifest.get()); !s.ok()) return fail(s);
  store::TierConfig tc;
  tc.nvme_dir = f.tier == "remote" && f.url.empty() ? "" : f.dir;
  tc.dram_bytes = f.tier == "dram" ? manifest->bytes * 2 : 0;
  tc.direct.depth = f.depth;
  tc.direct.block = static_cast<std::uint64_t>(f.block_mb) << 20;
  tc.remote.connections = f.connections;
  tc.verify_threads = f.verify_threads;
  tc.alloc = host_allocator_for_backend();
  tc.pool_bytes = f.prefault || f.tier == "dram" ? manifest->bytes + (64ull << 20) : 0;
  store::TierStore ts(tc);
  if (f.prefault) ts.pool().prefault((manifest->bytes + 4095) / 4096 * 4096, tc.pool_bytes);
  const store::ModelSource src{manifest, f.url};
  Status s;
  if (f.tier == "dram") {  // a first fill puts it there; the timed load starts from it
    if (auto warm = ts.acquire(src, &s); !warm || !(s = warm->wait_complete()).ok()) return fail(s);
    ts.release(manifest->id);
  }
  const auto t0 = Clock::now();
  auto image = ts.acquire(src, &s);
  if (!image) return fail(s);
  ImageLoadStats ls;
  const ImageLoadPath lp = f.path == "stream" ? ImageLoadPath::kStream
                           : f.path == "map"  ? ImageLoadPath::kMap
                           : f.path == "copy" ? ImageLoadPath::kCopy
                                              : ImageLoadPath::kAuto;
  llama_model* m = load_model_from_image(image, mp, &s, &ls, lp);
  const double load = since(t0);
  if (!m) return fail(s);
  const double first = first_token(m);
  ts.drain();
  report("store", f.tier, manifest->bytes, load, load + first, fill_report(ts, ls, image->pinned(), f));
  ts.release(manifest->id);
  llama_model_free(m);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"uma-load-bench: model load time per tier, against llama.cpp's loader and the hardware"};
  LoadBenchFlags f;
  add_flags(app, f);
  CLI11_PARSE(app, argc, argv);
  init_llama_backend();
  if (f.mode == "memcpy") return memcpy_bench(f.bytes);
  if (f.mode == "h2d") return h2d_bench(f.bytes);
  const llama_model_params mp = model_params(f.gpu_layers);
  return f.mode == "llama" ? llama_load(f, mp) : store_load(f, mp);
}
