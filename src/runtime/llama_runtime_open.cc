// LlamaRuntime::open (runtime/llama_runtime.h): llama.cpp's backend and log set up once, the
// model loaded (from a store image or the file), its placement logged, the context sized and made.
#include "runtime/llama_runtime.h"

#include "runtime/argmax.h"
#include "runtime/context_size.h"
#include "runtime/device_greedy.h"
#include "runtime/embedder.h"
#include "runtime/image_loader.h"
#include "runtime/sampler_chain.h"
#include "runtime/vocab_model.h"

#include <ggml-backend.h>
#include <llama.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cctype>
#include <cstdlib>
#include <exception>
#include <string_view>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

namespace uma {
namespace {

// While a context is made on this thread: llama.cpp's lines that size its buffers (the memory plan).
thread_local std::vector<std::string>* buffer_lines = nullptr;

void log_from_llama(ggml_log_level level, const char* text, void*) {
  std::string_view line(text);
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.remove_suffix(1);
  if (line.empty()) return;
  if (buffer_lines != nullptr && line.find(" buffer size = ") != std::string_view::npos) buffer_lines->emplace_back(line);
  switch (level) {
    case GGML_LOG_LEVEL_ERROR: spdlog::error("llama: {}", line); break;
    case GGML_LOG_LEVEL_WARN: spdlog::warn("llama: {}", line); break;
    default: spdlog::trace("llama: {}", line); break;
  }
}

}  // namespace

void init_llama_backend() {
  static std::once_flag once;
  std::call_once(once, [] {
    llama_log_set(log_from_llama, nullptr);
    llama_backend_init();
  });
}

int warm_gpu_backends() {
  init_llama_backend();
  int warmed = 0;
  for (std::size_t i = 0; i < ggml_backend_dev_count(); ++i) {
    ggml_backend_dev_t dev = ggml_backend_dev_get(i);
    if (ggml_backend_dev_type(dev) != GGML_BACKEND_DEVICE_TYPE_GPU) continue;
    // The device's context lives as long as the process; the buffer only makes the driver create it.
    if (ggml_backend_buffer_t b = ggml_backend_buft_alloc_buffer(ggml_backend_dev_buffer_type(dev), 1 << 20)) {
      ggml_backend_buffer_free(b);
      ++warmed;
    }
  }
  return warmed;
}

namespace {

// Where llama.cpp puts the weights: "CPU", or "22/22 layers + output on CUDA0 (NVIDIA ...
// HBM3)" (the last n_gpu_layers repeating layers, and the output layer once more are asked).
std::string placement(const llama_model* model, std::int32_t n_gpu_layers) {
  std::string gpus;
  for (std::size_t i = 0; i < ggml_backend_dev_count(); ++i) {
    ggml_backend_dev_t dev = ggml_backend_dev_get(i);
    if (ggml_backend_dev_type(dev) != GGML_BACKEND_DEVICE_TYPE_GPU) continue;
    if (!gpus.empty()) gpus += ", ";
    gpus += std::string(ggml_backend_dev_name(dev)) + " (" + ggml_backend_dev_description(dev) + ")";
  }
  const std::int32_t n_layer = llama_model_n_layer(model);
  if (n_gpu_layers <= 0 || gpus.empty()) return "CPU";
  const std::int32_t on_gpu = std::min(n_gpu_layers, n_layer);
  std::string s = std::to_string(on_gpu) + "/" + std::to_string(n_layer) + " layers";
  if (n_gpu_layers > n_layer) s += " + output";
  s += " on " + gpus;
  if (on_gpu < n_layer) s += ", the rest on CPU";
  return s;
}

// One pool of page-locked snapshot memory per process, shared by every model on the GPU, so its
// arena is page-locked once (kv_host_pool.h); it goes with the last runtime holding it.
// UMA_KV_HOST_ARENA_MB overrides `arena` (0: none, every snapshot block page-locked when needed).
std::shared_ptr<KvHostPool> shared_kv_host_pool(std::uint64_t arena) {
  static std::mutex mu;
  static std::weak_ptr<KvHostPool> shared;
  const std::lock_guard<std::mutex> lock(mu);
  if (std::shared_ptr<KvHostPool> pool = shared.lock()) return pool;
  store::HostAllocator locked = page_locked_allocator();
  if (!locked) return nullptr;
  if (const char* mb = std::getenv("UMA_KV_HOST_ARENA_MB")) arena = std::strtoull(mb, nullptr, 10) << 20;
  std::shared_ptr<KvHostPool> pool = KvHostPool::make(std::move(locked), std::uint64_t{1} << 30, arena);
  shared = pool;
  return pool;
}

// "llama_kv_cache:        CPU KV buffer size =   512.00 MiB" and "sched_reserve:  CUDA0 compute
// buffer size = 300.01 MiB": MiB by kind and buffer, e.g. "KV 512 MiB (CPU), compute 300 MiB (CUDA0 298, CPU 2)".
std::string summarize_buffers(const std::vector<std::string>& lines) {
  std::map<std::string, std::map<std::string, double>> mib;  // kind -> buffer -> MiB
  for (const std::string& line : lines) {
    const std::size_t eq = line.find(" buffer size = ");
    const std::size_t colon = line.find(':');
    if (eq == std::string::npos || colon == std::string::npos || colon > eq) continue;
    std::istringstream words(line.substr(colon + 1, eq - colon - 1));
    std::string buffer, kind;
    words >> buffer >> kind;
    if (kind.empty()) continue;
    mib[kind][buffer] += std::strtod(line.c_str() + eq + 15, nullptr);
  }
  std::string out;
  for (const auto& [kind, by_buffer] : mib) {
    double total = 0;
    std::string parts;
    for (const auto& [buffer, m] : by_buffer) {
      total += m;
      parts += (parts.empty() ? "" : ", ") + buffer + (by_buffer.size() > 1 ? " " + std::to_string(static_cast<long>(m + 0.5)) : "");
    }
    out += (out.empty() ? "" : ", ") + kind + " " + std::to_string(static_cast<long>(total + 0.5)) + " MiB (" + parts + ")";
  }
  return out;
}

// llama.cpp's model parameters: how many layers go to a GPU and how the file is read.
llama_model_params model_params_for(const RuntimeConfig& config) {
  llama_model_params mp = llama_model_default_params();
  // Nothing here names a backend: llama.cpp offloads to whichever GPU backend it was built with.
  const bool gpu = llama_supports_gpu_offload();
  mp.n_gpu_layers = !gpu ? 0 : config.n_gpu_layers < 0 ? std::numeric_limits<std::int32_t>::max() : config.n_gpu_layers;
  if (config.use_mmap) mp.load_mode = config.use_mlock ? LLAMA_LOAD_MODE_MMAP_MLOCK : LLAMA_LOAD_MODE_MMAP;
  else mp.load_mode = config.use_mlock ? LLAMA_LOAD_MODE_MLOCK : LLAMA_LOAD_MODE_NONE;
  return mp;
}

bool env_is(const char* name, std::string_view value) {
  const char* v = std::getenv(name);
  return v != nullptr && std::string_view(v) == value;
}

}  // namespace

std::unique_ptr<LlamaRuntime> LlamaRuntime::open(const RuntimeConfig& config, Status* status) {
  init_llama_backend();
  std::unique_ptr<LlamaRuntime> rt(new LlamaRuntime());
  const llama_model_params mp = model_params_for(config);
  const bool on_gpu = llama_supports_gpu_offload() && mp.n_gpu_layers != 0;  // the weights (some of them) on a GPU
  if (!rt->load_weights(config, mp, on_gpu, status)) return nullptr;

  llama_context_params cp = llama_context_default_params();
  const bool per_seq = uma::kv_per_sequence(config.kv_layout, config.n_seq_max);
  if (!rt->size_context(config, on_gpu, per_seq, cp, status)) return nullptr;
  rt->on_gpu_ = on_gpu;
  rt->graphs_kept_ = std::max(0, config.graphs_kept);
  // KV snapshots (prefixes, paused requests) in page-locked memory where a GPU holds the KV.
  if (on_gpu) {
    rt->kv_host_ = shared_kv_host_pool(config.kv_host_arena_bytes);
  }
  cp.kv_unified = !per_seq;
  rt->flash_attn_ = choose_flash_attention(config.flash_attn, !llama_supports_gpu_offload(), per_seq);
  cp.flash_attn_type = rt->flash_attn_ == FlashAttention::kOn    ? LLAMA_FLASH_ATTN_TYPE_ENABLED
                       : rt->flash_attn_ == FlashAttention::kOff ? LLAMA_FLASH_ATTN_TYPE_DISABLED
                                                                 : LLAMA_FLASH_ATTN_TYPE_AUTO;
  using TimingMode = DecodeTiming::Mode;
  rt->timing_.mode = env_is("UMA_DECODE_TIMING", "1")           ? TimingMode::kWaited
                     : env_is("UMA_DECODE_TIMING", "pipelined") ? TimingMode::kPipelined
                                                                : TimingMode::kOff;
  cp.no_perf = !rt->timing_.on();
  const bool output_on_gpu = on_gpu && mp.n_gpu_layers > llama_model_n_layer(rt->model_);
  std::vector<llama_sampler_seq_config> sampler_configs;  // outlives the context's creation
  rt->add_device_samplers(config, output_on_gpu, per_seq, cp, sampler_configs);
  if (!rt->make_context(cp, config, status)) return nullptr;
  rt->per_seq_ = per_seq;
  rt->size_batch_storage();
  llama_set_graphs_kept(rt->ctx_, rt->graphs_kept_);
  rt->set_stream_options(config, per_seq, on_gpu);
  if (on_gpu && config.verify_outputs > 0) {
    rt->reserve_outputs(std::clamp(config.verify_outputs, rt->n_seq_max_, rt->n_ubatch_));
  }
  *status = Status::Ok();
  return rt;
}

// The weights: from the store's image, from a host copy of the file, or from the file.
bool LlamaRuntime::load_weights(const RuntimeConfig& config, const llama_model_params& mp, bool on_gpu, Status* status) {
  if (config.image) {
    ImageLoadStats ls;
    model_ = load_model_from_image(config.image, mp, status, &ls, config.image_load);
    if (ls.path == static_cast<int>(ImageLoadPath::kMap)) image_ = config.image;  // its pages are the weights
    if (model_ == nullptr) return false;
  } else {
    bool handled = false;
    if (on_gpu && config.host_copy) {
      ImageLoadStats ls;
      model_ = load_model_from_host_file(config.model_path, mp, &handled, status, &ls);
      if (handled && model_ == nullptr) return false;
      if (handled) {
        spdlog::info("model copied from host memory: {:.0f} MiB in {:.3f} s ({}; its tensors {:.0f} MiB in {:.3f} s)",
                     ls.bytes_read / 1048576.0, ls.seconds,
                     ls.pinned_ahead ? std::string("pinned ahead") : fmt::format("pinning its pages {:.3f} s", ls.register_seconds),
                     ls.tensor_bytes / 1048576.0, ls.tensor_seconds);
      }
    }
    if (!handled) model_ = llama_model_load_from_file(config.model_path.c_str(), mp);
  }
  if (model_ == nullptr) {
    *status = Status(ErrorCode::kModelLoad, "cannot load model '" + config.model_path + "'");
    return false;
  }
  vocab_ = llama_model_get_vocab(model_);
  placement_ = placement(model_, mp.n_gpu_layers);
  return true;
}

// n_ctx within the KV budget, the batch sizes and the threads.
bool LlamaRuntime::size_context(const RuntimeConfig& config, bool on_gpu, bool per_seq, llama_context_params& cp,
                                Status* status) {
  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  // Per-sequence KV: n_ctx is every stream's cells together, n_ctx / n_seq_max each.
  const std::int32_t streams = per_seq ? std::max(config.n_seq_max, 1) : 1;
  const std::int64_t budget = config.kv_budget_bytes >= 0 ? config.kv_budget_bytes : kv_budget_bytes(on_gpu);
  const std::int64_t bytes_per_cell = kv_bytes_per_token(model_);
  std::int32_t n_ctx = config.n_ctx;
  if (n_ctx <= 0) {  // the model's trained context, or the largest whose KV fits
    const ContextChoice c = choose_context(llama_model_n_ctx_train(model_), bytes_per_cell * streams, budget);
    n_ctx = per_seq ? c.n_ctx * streams : c.n_ctx;
    n_ctx_why_ = per_seq ? c.why + " per stream" : c.why;
  } else {
    if (per_seq) n_ctx = std::max(1, n_ctx / streams) * streams;
    if (config.kv_budget_bytes >= 0 && static_cast<std::int64_t>(n_ctx) * bytes_per_cell > config.kv_budget_bytes) {
      *status = Status(ErrorCode::kInvalidArgument,
                       "--n-ctx " + std::to_string(n_ctx) + " needs " + std::to_string((n_ctx * bytes_per_cell) >> 20) +
                           " MiB of KV, over the --kv-mb budget of " + std::to_string(config.kv_budget_bytes >> 20) + " MiB");
      return false;
    }
  }
  kv_budget_ = budget;
  kv_budget_why_ = config.kv_budget_bytes >= 0 ? "--kv-mb"
                   : on_gpu ? "85% of the least free GPU memory, less 512 MiB"
                            : "half of available host memory";
  cp.n_ctx = static_cast<uint32_t>(n_ctx);
  const std::int32_t n_ubatch = std::max(config.n_ubatch, 1);
  const std::int32_t n_batch = config.n_batch > 0 ? config.n_batch : std::max(2048, n_ubatch);
  cp.n_batch = static_cast<uint32_t>(n_batch);
  cp.n_ubatch = static_cast<uint32_t>(std::min(n_ubatch, n_batch));
  cp.n_seq_max = static_cast<uint32_t>(config.n_seq_max);
  cp.n_threads = config.n_threads > 0 ? config.n_threads : hw;
  cp.n_threads_batch = cp.n_threads;
  n_threads_ = static_cast<std::int32_t>(cp.n_threads);
  return true;
}

// Backend sampling: a greedy chain per sequence id, given to the context at creation so that its
// first graph reserve already counts them; llama.cpp must be told the most outputs a sequence
// has in a batch (a decode row and its draft rows, or a prompt chunk's last token).
void LlamaRuntime::add_device_samplers(const RuntimeConfig& config, bool output_on_gpu, bool per_seq,
                                       llama_context_params& cp, std::vector<llama_sampler_seq_config>& configs) {
  device_share_.per_row = env_is("UMA_DEVICE_GREEDY", "row");
  device_share_.copy_logits = env_is("UMA_DEVICE_GREEDY", "copy");
  const bool wanted =
      config.backend_sampling == DeviceSampling::kOn || (config.backend_sampling == DeviceSampling::kAuto && output_on_gpu);
  if (!wanted) return;
  // Per-sequence KV: only the ids requests run under; ids above them hold kept prefixes and
  // never sample. (In a unified KV kept prefixes take any free id.)
  const std::int32_t n = per_seq && config.n_seq_sampling > 0 ? std::min(config.n_seq_sampling, config.n_seq_max)
                                                               : config.n_seq_max;
  device_share_.end_tokens = end_tokens(vocab_);  // one lookup: a copy of the list
  device_share_.ignore_end.assign(static_cast<std::size_t>(n), 0);
  for (std::int32_t seq = 0; seq < n; ++seq) {
    llama_sampler* chain = make_device_greedy(&device_share_, seq);
    backend_greedy_.push_back(chain);
    configs.push_back({seq, chain});
  }
  cp.samplers = configs.data();
  cp.n_samplers = configs.size();
  outputs_per_seq_ = std::max(1, config.outputs_per_seq);
  // A first-pass entry asks for an output besides its chunk's last one (first_entries_output).
  cp.n_outputs_max_per_seq = static_cast<std::uint32_t>(std::max(outputs_per_seq_, per_seq && graphs_kept_ > 0 ? 2 : 1));
}

// The context, with the sizes llama.cpp gave it and its buffers as it logged them.
bool LlamaRuntime::make_context(const llama_context_params& cp, const RuntimeConfig& config, Status* status) {
  std::vector<std::string> sized;
  buffer_lines = &sized;
  ctx_ = llama_init_from_model(model_, cp);
  buffer_lines = nullptr;
  buffers_ = summarize_buffers(sized);
  if (ctx_ == nullptr) {
    *status = Status(ErrorCode::kModelLoad, "cannot create a context (n_ctx " + std::to_string(cp.n_ctx) +
                                                ", sequences " + std::to_string(config.n_seq_max) + ")");
    return false;
  }
  n_ctx_ = static_cast<std::int32_t>(llama_n_ctx(ctx_));
  n_batch_ = static_cast<std::int32_t>(llama_n_batch(ctx_));
  n_ubatch_ = static_cast<std::int32_t>(llama_n_ubatch(ctx_));
  n_seq_max_ = static_cast<std::int32_t>(llama_n_seq_max(ctx_));
  n_ctx_seq_ = static_cast<std::int32_t>(llama_n_ctx_seq(ctx_));
  return true;
}

// The per-sequence state and the llama_batch views' storage, sized for the context.
void LlamaRuntime::size_batch_storage() {
  samplers_.assign(static_cast<size_t>(n_seq_max_), nullptr);
  greedy_.assign(static_cast<size_t>(n_seq_max_), false);
  device_pick_.assign(static_cast<size_t>(n_seq_max_), false);
  copy_pending_.assign(static_cast<size_t>(n_seq_max_), 0);
  attached_.assign(backend_greedy_.size(), true);
  const auto nb = static_cast<size_t>(n_batch_);
  batch_token_.resize(nb);
  batch_pos_.resize(nb);
  batch_nseq_.assign(nb, 1);
  batch_seq_.resize(nb);
  batch_seq_ptr_.resize(nb);
  for (size_t i = 0; i < nb; ++i) batch_seq_ptr_[i] = &batch_seq_[i];
  batch_logits_.resize(nb);
}

// How a per-sequence KV's batches are arranged into streams (stream_batch.h).
void LlamaRuntime::set_stream_options(const RuntimeConfig& config, bool per_seq, bool on_gpu) {
  arrange_ = per_seq && config.stream_batches && !env_is("UMA_STREAM_BATCH", "plain");
  // A filler writes one cell into an idle stream, removed after the decode: harmless where a
  // stream's cells are just its positions, not where a window or a recurrent state moves on.
  const bool fillers_safe = llama_model_n_swa(model_) == 0 && !llama_model_is_recurrent(model_) &&
                            !llama_model_is_hybrid(model_);
  if (fillers_safe) {
    stream_options_.filler_pos = [this](std::int32_t seq) { return filler_pos(seq); };
  }
  const llama_token bos = llama_vocab_bos(vocab_);
  stream_options_.filler_token = bos >= 0 ? bos : 0;
  stream_options_.max_entries = n_ubatch_;  // a filler must not cost a pass
  stream_options_.n_ubatch = n_ubatch_;
  stream_options_.pad_entries_per_pass = config.pad_entries_per_pass >= 0 ? config.pad_entries_per_pass : on_gpu ? 64 : 0;
  stream_options_.max_batch = n_batch_;
  stream_options_.seq_cells = n_ctx_seq_;
  stream_options_.first_entries_output = graphs_kept_ > 0;
  // On a CPU a pass is one more read of the weights (a decode's worth of time: ~16 ms for the
  // 143 M-param Q8_0 model in docs/BENCHMARKS.md) and a deep stream's depth costs every row beside
  // it ~7 us per cell.
  stream_options_.deep_pass_row_cells = config.deep_pass_row_cells >= 0 ? config.deep_pass_row_cells
                                        : on_gpu                              ? 0
                                                                              : 2048;
}

void LlamaRuntime::reserve_outputs(std::int32_t rows) {
  // llama.cpp grows its output buffer (page-locked where a GPU computes the output: a vocabulary
  // of floats a row, about five with device sampling) the first time a decode asks for more rows than
  // any before, and clears it. Measured on a GPU (8B, 128k vocabulary): a first 128-row
  // verifying tick took 70 ms against 20 predicted, a one-off the scheduler then learnt as what
  // verifying costs. So the verifying ticks' rows are reserved here, before any request.
  const std::int32_t per_seq = backend_greedy_.empty() ? std::min(rows, n_ctx_seq_) : outputs_per_seq_;
  const std::int32_t seqs = std::min<std::int32_t>((rows + per_seq - 1) / per_seq,
                                                   backend_greedy_.empty() ? n_seq_max_ : static_cast<std::int32_t>(backend_greedy_.size()));
  std::vector<BatchEntry> entries;
  const llama_token bos = std::max<llama_token>(0, llama_vocab_bos(vocab_));
  for (std::int32_t seq = 0; seq < seqs; ++seq) {
    for (std::int32_t p = 0; p < per_seq && static_cast<std::int32_t>(entries.size()) < rows; ++p) entries.push_back({bos, p, seq, true});
  }
  const Status st = decode(entries);
  llama_synchronize(ctx_);
  for (std::int32_t seq = 0; seq < seqs; ++seq) llama_memory_seq_rm(llama_get_memory(ctx_), seq, -1, -1);
  if (st.ok()) {
    outputs_reserved_ = static_cast<std::int32_t>(entries.size());
    spdlog::info("output rows reserved for verifying ticks: {}", outputs_reserved_);
  } else {
    spdlog::warn("reserving {} output rows: {} (llama.cpp grows its buffer when first needed)", rows, st.to_string());
  }
}

}  // namespace uma
