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
#include <thread>

namespace uma {
namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

void log_from_llama(ggml_log_level level, const char* text, void*) {
  std::string_view line(text);
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.remove_suffix(1);
  if (line.empty()) return;
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

namespace {

// Where llama.cpp puts the weights: "CPU", or "22/22 layers + output on CUDA0 (NVIDIA H100 80GB
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

}  // namespace

std::unique_ptr<LlamaRuntime> LlamaRuntime::open(const RuntimeConfig& config, Status* status) {
  init_llama_backend();
  std::unique_ptr<LlamaRuntime> rt(new LlamaRuntime());

  llama_model_params mp = llama_model_default_params();
  // Nothing here names a backend: llama.cpp offloads to whichever GPU backend it was built with.
  const bool gpu = llama_supports_gpu_offload();
  mp.n_gpu_layers = !gpu ? 0 : config.n_gpu_layers < 0 ? std::numeric_limits<std::int32_t>::max() : config.n_gpu_layers;
  if (config.use_mmap) mp.load_mode = config.use_mlock ? LLAMA_LOAD_MODE_MMAP_MLOCK : LLAMA_LOAD_MODE_MMAP;
  else mp.load_mode = config.use_mlock ? LLAMA_LOAD_MODE_MLOCK : LLAMA_LOAD_MODE_NONE;
  if (config.image) {
    ImageLoadStats ls;
    rt->model_ = load_model_from_image(config.image, mp, status, &ls, config.image_load);
    if (ls.path == static_cast<int>(ImageLoadPath::kMap)) rt->image_ = config.image;  // its pages are the weights
    if (rt->model_ == nullptr) return nullptr;
  } else {
    rt->model_ = llama_model_load_from_file(config.model_path.c_str(), mp);
  }
  if (rt->model_ == nullptr) {
    *status = Status(ErrorCode::kModelLoad, "cannot load model '" + config.model_path + "'");
    return nullptr;
  }
  rt->vocab_ = llama_model_get_vocab(rt->model_);
  rt->placement_ = placement(rt->model_, mp.n_gpu_layers);

  llama_context_params cp = llama_context_default_params();
  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const bool per_seq = config.kv_layout == "per-seq" || (config.kv_layout == "auto" && config.n_seq_max > 1);
  // Per-sequence KV: n_ctx is the sessions' streams' cells; the kept prefixes' streams come on top.
  const std::int32_t rooms = per_seq && config.n_seq_sampling > 0 ? std::min(config.n_seq_sampling, config.n_seq_max)
                                                                  : config.n_seq_max;
  const std::int32_t streams = per_seq ? config.n_seq_max : 1;
  std::int32_t n_ctx = config.n_ctx;
  if (n_ctx <= 0) {  // the model's trained context, or the largest whose KV fits
    const std::int64_t cell = kv_bytes_per_token(rt->model_) * streams;
    const ContextChoice c = choose_context(llama_model_n_ctx_train(rt->model_), cell,
                                           kv_budget_bytes(llama_supports_gpu_offload() && mp.n_gpu_layers != 0));
    n_ctx = per_seq ? c.n_ctx * streams : c.n_ctx;
    rt->n_ctx_why_ = per_seq ? c.why + " per stream" : c.why;
  } else if (per_seq) {
    n_ctx = std::max(1, n_ctx / std::max(rooms, 1)) * streams;
  }
  cp.n_ctx = static_cast<uint32_t>(n_ctx);
  cp.n_batch = static_cast<uint32_t>(config.n_batch);
  cp.n_ubatch = static_cast<uint32_t>(config.n_batch);
  cp.n_seq_max = static_cast<uint32_t>(config.n_seq_max);
  cp.n_threads = config.n_threads > 0 ? config.n_threads : hw;
  cp.n_threads_batch = cp.n_threads;
  rt->n_threads_ = static_cast<std::int32_t>(cp.n_threads);
  const bool on_gpu = llama_supports_gpu_offload() && mp.n_gpu_layers != 0;
  rt->on_gpu_ = on_gpu;
  // KV snapshots (prefixes, paused requests) in page-locked memory where a GPU holds the KV.
  if (on_gpu) {
    if (store::HostAllocator locked = page_locked_allocator()) rt->kv_host_ = KvHostPool::make(locked, kKvHostRetain);
  }
  cp.kv_unified = !per_seq;
  // auto: llama.cpp's choice where a GPU runs the model; off on CPU-only builds, where its flash
  // attention kernel is several times slower for small batches over a deep KV cache (measured:
  // docs/BENCHMARKS.md, "Flash attention"), which is exactly a serving tick.
  const bool cpu_only = !llama_supports_gpu_offload();
  cp.flash_attn_type = config.flash_attn == "on"                   ? LLAMA_FLASH_ATTN_TYPE_ENABLED
                       : config.flash_attn == "off" || cpu_only ? LLAMA_FLASH_ATTN_TYPE_DISABLED
                                                                   : LLAMA_FLASH_ATTN_TYPE_AUTO;
  const char* timing = std::getenv("UMA_DECODE_TIMING");
  rt->timing_.on = timing != nullptr && std::string_view(timing) == "1";
  cp.no_perf = !rt->timing_.on;
  // Backend sampling: a greedy chain per sequence id, given to the context at creation so that its
  // first graph reserve already counts them; llama.cpp must be told the most outputs a sequence
  // has in a batch (a decode row and its draft rows, or a prompt chunk's last token).
  const bool output_on_gpu = on_gpu && mp.n_gpu_layers > llama_model_n_layer(rt->model_);
  std::vector<llama_sampler_seq_config> sampler_configs;
  const char* device_greedy = std::getenv("UMA_DEVICE_GREEDY");
  rt->device_share_.per_row = device_greedy != nullptr && std::string_view(device_greedy) == "row";
  if (config.backend_sampling == "on" || (config.backend_sampling == "auto" && output_on_gpu)) {
    // Per-sequence KV: only the ids requests run under; ids above them hold kept prefixes and
    // never sample. (In a unified KV kept prefixes take any free id.)
    const std::int32_t n = per_seq && config.n_seq_sampling > 0 ? std::min(config.n_seq_sampling, config.n_seq_max)
                                                                 : config.n_seq_max;
    for (std::int32_t seq = 0; seq < n; ++seq) {
      llama_sampler* chain = make_device_greedy(&rt->device_share_);
      rt->backend_greedy_.push_back(chain);
      sampler_configs.push_back({seq, chain});
    }
    cp.samplers = sampler_configs.data();
    cp.n_samplers = sampler_configs.size();
    rt->outputs_per_seq_ = std::max(1, config.outputs_per_seq);
    cp.n_outputs_max_per_seq = static_cast<std::uint32_t>(rt->outputs_per_seq_);
  }
  rt->ctx_ = llama_init_from_model(rt->model_, cp);
  if (rt->ctx_ == nullptr) {
    *status = Status(ErrorCode::kModelLoad, "cannot create a context (n_ctx " + std::to_string(n_ctx) +
                                                ", sequences " + std::to_string(config.n_seq_max) + ")");
    return nullptr;
  }
  rt->n_ctx_ = static_cast<std::int32_t>(llama_n_ctx(rt->ctx_));
  rt->n_batch_ = static_cast<std::int32_t>(llama_n_batch(rt->ctx_));
  rt->n_seq_max_ = static_cast<std::int32_t>(llama_n_seq_max(rt->ctx_));
  rt->n_ctx_seq_ = static_cast<std::int32_t>(llama_n_ctx_seq(rt->ctx_));
  rt->per_seq_ = per_seq;
  rt->samplers_.assign(static_cast<size_t>(rt->n_seq_max_), nullptr);
  rt->greedy_.assign(static_cast<size_t>(rt->n_seq_max_), false);
  rt->copy_pending_.assign(static_cast<size_t>(rt->n_seq_max_), 0);
  rt->attached_.assign(rt->backend_greedy_.size(), true);
  const auto nb = static_cast<size_t>(rt->n_batch_);
  rt->batch_token_.resize(nb);
  rt->batch_pos_.resize(nb);
  rt->batch_nseq_.assign(nb, 1);
  rt->batch_seq_.resize(nb);
  rt->batch_seq_ptr_.resize(nb);
  for (size_t i = 0; i < nb; ++i) rt->batch_seq_ptr_[i] = &rt->batch_seq_[i];
  rt->batch_logits_.resize(nb);
  rt->arrange_ = per_seq && config.stream_batches;
  const char* stream_batch = std::getenv("UMA_STREAM_BATCH");
  if (stream_batch != nullptr && std::string_view(stream_batch) == "plain") rt->arrange_ = false;
  // A filler writes one cell into an idle stream, removed after the decode: harmless where a
  // stream's cells are just its positions, not where a window or a recurrent state moves on.
  const bool fillers_safe = llama_model_n_swa(rt->model_) == 0 && !llama_model_is_recurrent(rt->model_) &&
                            !llama_model_is_hybrid(rt->model_);
  if (fillers_safe) {
    LlamaRuntime* self = rt.get();
    rt->stream_options_.filler_pos = [self](std::int32_t seq) { return self->filler_pos(seq); };
  }
  const llama_token bos = llama_vocab_bos(rt->vocab_);
  rt->stream_options_.filler_token = bos >= 0 ? bos : 0;
  rt->stream_options_.max_entries = rt->n_batch_;
  *status = Status::Ok();
  return rt;
}

LlamaRuntime::~LlamaRuntime() {
  embedder_.reset();  // its context uses the model
  for (llama_sampler* s : samplers_) {
    if (s != nullptr) llama_sampler_free(s);
  }
  if (ctx_ != nullptr) llama_free(ctx_);
  for (llama_sampler* s : backend_greedy_) llama_sampler_free(s);  // after the context that uses them
  for (llama_sampler* s : retired_) llama_sampler_free(s);
  if (model_ != nullptr) llama_model_free(model_);
}

Status LlamaRuntime::tokenize(std::string_view text, std::vector<Token>& out, bool parse_special) const {
  return tokenize_text(vocab_, text, out, parse_special);
}

bool LlamaRuntime::valid_token(Token token) const { return token >= 0 && token < llama_vocab_n_tokens(vocab_); }

std::string LlamaRuntime::piece(Token token) const {
  char buf[128];
  int32_t n = llama_token_to_piece(vocab_, token, buf, sizeof buf, 0, /*special=*/false);
  if (n >= 0) return std::string(buf, static_cast<size_t>(n));
  std::string big(static_cast<size_t>(-n), '\0');
  n = llama_token_to_piece(vocab_, token, big.data(), static_cast<int32_t>(big.size()), 0, false);
  big.resize(static_cast<size_t>(std::max(0, n)));
  return big;
}

bool LlamaRuntime::is_end_of_generation(Token token) const { return llama_vocab_is_eog(vocab_, token); }

Status LlamaRuntime::start_sequence(std::int32_t seq, const SamplingParams& params) {
  if (seq < 0 || seq >= n_seq_max_) return Status(ErrorCode::kInternal, "sequence id out of range");
  end_sequence(seq);  // a sequence starts empty, whatever came before
  llama_sampler* chain = make_sampler_chain(params, vocab_);
  if (chain == nullptr) return Status(ErrorCode::kBadRequest, "the grammar does not parse", "grammar");
  samplers_[static_cast<size_t>(seq)] = chain;
  greedy_[static_cast<size_t>(seq)] = greedy_only(chain);
  attach_backend_sampler(seq, greedy_[static_cast<size_t>(seq)]);
  return Status::Ok();
}

void LlamaRuntime::attach_backend_sampler(std::int32_t seq, bool greedy) {
  if (static_cast<std::size_t>(seq) >= attached_.size() || attached_[static_cast<size_t>(seq)] == greedy) return;
  // Detaching brings this sequence's logits rows back to the host; both take effect at the next
  // decode, which re-reserves llama.cpp's graphs first (so switch only when the kind changes).
  llama_sampler*& chain = backend_greedy_[static_cast<size_t>(seq)];
  if (greedy) {
    // A chain is set up for the device once (llama.cpp asserts it): a fresh one each attach. The
    // one it replaces may still be named by the last graph until the next decode re-reserves.
    retired_.push_back(chain);
    chain = make_device_greedy(&device_share_);
  }
  // llama.cpp may refuse a device sampler (a tensor-split model): that id samples on the host.
  const bool ok = llama_set_sampler(ctx_, seq, greedy ? chain : nullptr);
  attached_[static_cast<size_t>(seq)] = greedy && ok;
  ++sampler_switches_;
}

void LlamaRuntime::end_sequence(std::int32_t seq) {
  if (seq < 0 || seq >= n_seq_max_) return;
  llama_memory_seq_rm(llama_get_memory(ctx_), seq, -1, -1);
  llama_sampler*& s = samplers_[static_cast<size_t>(seq)];
  if (s != nullptr) llama_sampler_free(s);
  s = nullptr;
}

std::int32_t LlamaRuntime::timed_decode(const llama_batch& b, std::size_t n_tokens) {
  const auto now_ns = [] {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
  };
  const std::int64_t t0 = now_ns();
  const int32_t rc = llama_decode(ctx_, b);
  const std::int64_t t1 = now_ns();
  llama_synchronize(ctx_);
  const std::int64_t t2 = now_ns();
  if (timing_.prev_done_ns != 0) {
    const double launch_ms = static_cast<double>(t1 - t0) / 1e6;
    if (launch_ms > 5.0 && timing_.slow_logged < 40) {
      // What a slow launch was: its shape (prompt chunks, sequences) and whether llama.cpp reused
      // its last graph; the sampler switches since the last call show a graph re-reserve.
      ++timing_.slow_logged;
      std::map<std::int32_t, std::int32_t> per_seq;
      for (std::size_t i = 0; i < n_tokens; ++i) ++per_seq[b.seq_id[i][0]];
      std::int32_t longest = 0;
      for (const auto& [seq, n] : per_seq) longest = std::max(longest, n);
      const llama_perf_context_data perf = llama_perf_context(ctx_);
      spdlog::info("slow launch {:.2f} ms (device {:.2f} ms): {} tokens, {} sequences, longest run {}, graph reused {}, "
                   "sampler switches {}, fillers {}", launch_ms, static_cast<double>(t2 - t1) / 1e6, n_tokens, per_seq.size(), longest,
                   perf.n_reused > timing_.reused_before ? "yes" : "no", sampler_switches_ - timing_.switches_before,
                   arrange_ ? arranged_.fillers.size() : 0);
    }
    timing_.gap_ms.push_back(static_cast<double>(t0 - timing_.prev_done_ns) / 1e6);
    timing_.launch_ms.push_back(static_cast<double>(t1 - t0) / 1e6);
    timing_.wait_ms.push_back(static_cast<double>(t2 - t1) / 1e6);
    timing_.tokens.push_back(static_cast<double>(n_tokens));
    timing_.sample_ms.push_back(static_cast<double>(timing_.sample_ns) / 1e6);
    if (timing_.gap_ms.size() >= 100) report_timing();
  }
  timing_.prev_done_ns = t2;
  timing_.sample_ns = 0;
  timing_.reused_before = llama_perf_context(ctx_).n_reused;
  timing_.switches_before = sampler_switches_;
  return rc;
}

std::int32_t LlamaRuntime::filler_pos(std::int32_t seq) const {
  if ((copy_pending_[static_cast<size_t>(seq)] & kCopyDestination) != 0) return -1;  // its cells are not known yet
  const std::int32_t pos = llama_memory_seq_pos_max(llama_get_memory(ctx_), seq) + 1;
  return pos < n_ctx_seq_ ? pos : -1;
}

std::int32_t LlamaRuntime::row_of(std::int32_t batch_index) const {
  if (!arrange_) return batch_index;
  if (batch_index < 0 || static_cast<std::size_t>(batch_index) >= arranged_.index_of.size()) return -1;
  return arranged_.index_of[static_cast<std::size_t>(batch_index)];
}

Status LlamaRuntime::decode(std::span<const BatchEntry> caller_batch) {
  if (caller_batch.empty()) return Status::Ok();
  if (static_cast<std::int32_t>(caller_batch.size()) > n_batch_) return Status(ErrorCode::kInternal, "batch over n_batch");
  std::span<const BatchEntry> batch = caller_batch;
  if (arrange_) {
    arrange_for_streams(caller_batch, stream_options_, arranged_);
    batch = arranged_.entries;
  }
  for (size_t i = 0; i < batch.size(); ++i) {
    batch_token_[i] = batch[i].token;
    batch_pos_[i] = batch[i].pos;
    batch_seq_[i] = batch[i].seq;
    batch_logits_[i] = batch[i].logits ? 1 : 0;
  }
  llama_batch b{};
  b.n_tokens = static_cast<int32_t>(batch.size());
  b.token = batch_token_.data();
  b.pos = batch_pos_.data();
  b.n_seq_id = batch_nseq_.data();
  b.seq_id = batch_seq_ptr_.data();
  b.logits = batch_logits_.data();
  const int32_t rc = timing_.on ? timed_decode(b, batch.size()) : llama_decode(ctx_, b);
  if (arrange_) {
    // The fillers' cells go again (on the host only: the next graph's mask no longer sees them).
    llama_memory_t mem = llama_get_memory(ctx_);
    for (const StreamFiller& f : arranged_.fillers) llama_memory_seq_rm(mem, f.seq, f.pos, -1);
    fillers_total_ += arranged_.fillers.size();
  }
  // llama_decode applies queued stream copies before it looks for cells (0) or finds none (1).
  if (rc == 0 || rc == 1) std::fill(copy_pending_.begin(), copy_pending_.end(), 0);
  // Retired chains are named by no graph now: a decode that got this far re-reserved without them,
  // and one that failed earlier left the reserve pending, which drops the old graphs first.
  for (llama_sampler* s : retired_) llama_sampler_free(s);
  retired_.clear();
  if (rc == 0) return Status::Ok();
  if (rc == 1) return Status(ErrorCode::kKvExhausted, "no KV cells for the batch");
  return Status(ErrorCode::kDecodeFailed, "llama_decode returned " + std::to_string(rc));
}

void LlamaRuntime::synchronize() { llama_synchronize(ctx_); }

void LlamaRuntime::report_timing() {
  const auto pct = [](std::vector<double>& v, double q) {
    std::sort(v.begin(), v.end());
    return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1))];
  };
  const llama_perf_context_data perf = llama_perf_context(ctx_);
  spdlog::info("decode timing, {} calls: tokens p50 {:.0f}; launch ms p50 {:.2f} p90 {:.2f}; device wait ms p50 {:.2f} "
               "p90 {:.2f}; host gap ms p50 {:.2f} p90 {:.2f} (sampling p50 {:.2f}); graphs reused so far {}",
               timing_.gap_ms.size(), pct(timing_.tokens, 0.5), pct(timing_.launch_ms, 0.5), pct(timing_.launch_ms, 0.9),
               pct(timing_.wait_ms, 0.5), pct(timing_.wait_ms, 0.9), pct(timing_.gap_ms, 0.5), pct(timing_.gap_ms, 0.9),
               pct(timing_.sample_ms, 0.5), perf.n_reused);
  timing_.launch_ms.clear();
  timing_.wait_ms.clear();
  timing_.gap_ms.clear();
  timing_.tokens.clear();
  timing_.sample_ms.clear();
}

Token LlamaRuntime::sample(std::int32_t seq, std::int32_t batch_index) {
  if (!timing_.on) return sample_row(seq, batch_index);
  const auto t0 = std::chrono::steady_clock::now();
  const Token t = sample_row(seq, batch_index);
  timing_.sample_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
  return t;
}

Token LlamaRuntime::sample_row(std::int32_t seq, std::int32_t caller_index) {
  const auto s = static_cast<size_t>(seq);
  const std::int32_t batch_index = row_of(caller_index);
  if (batch_index < 0) {  // not an entry of the last decode (llama.cpp would read -1 as its last row)
    spdlog::error("sample: sequence {} asked for entry {}, not in the last decode; ending it", seq, caller_index);
    return llama_vocab_eos(vocab_);
  }
  if (greedy_[s] && s < attached_.size() && attached_[s]) {
    // Sampled on the device, in the decode's graph: the token id is all that came back (no
    // logits row either, so there is nothing on the host to fall back on).
    const llama_token t = llama_get_sampled_token_ith(ctx_, batch_index);
    if (t != LLAMA_TOKEN_NULL) return t;
    spdlog::error("sample: sequence {} row {} has no device-sampled token; ending it", seq, batch_index);
    return llama_vocab_eos(vocab_);
  }
  const float* row = llama_get_logits_ith(ctx_, batch_index);
  if (samplers_[s] == nullptr || row == nullptr) {
    // Not reachable through the scheduler (a row it asked for, of a live sequence); ending the
    // sequence beats reading a row that is not there.
    spdlog::error("sample: sequence {} row {} has no sampler or logits; ending it", seq, batch_index);
    return llama_vocab_eos(vocab_);
  }
  // Greedy is the argmax of the logits row, which is all its one-sampler chain computes (and it
  // keeps no state): read the row in place instead of building the chain's 32k-entry candidate
  // array, which at 64 rows a tick was most of the host time between two decodes.
  if (greedy_[s]) return argmax_first(row, llama_vocab_n_tokens(vocab_));
  return llama_sampler_sample(samplers_[s], ctx_, batch_index);
}

std::span<const float> LlamaRuntime::logits(std::int32_t caller_index) {
  const std::int32_t batch_index = row_of(caller_index);
  if (batch_index < 0) return {};
  // A row sampled on the device never came to the host.
  if (!backend_greedy_.empty() && llama_get_sampled_token_ith(ctx_, batch_index) != LLAMA_TOKEN_NULL) return {};
  const float* row = llama_get_logits_ith(ctx_, batch_index);
  if (row == nullptr) return {};
  return {row, static_cast<size_t>(llama_vocab_n_tokens(vocab_))};
}

std::size_t LlamaRuntime::kv_state_bytes(std::int32_t seq) const {
  return llama_state_seq_get_size(ctx_, seq);
}

namespace {
void free_parked_sampler(void* p) { llama_sampler_free(static_cast<llama_sampler*>(p)); }
void keep_unparked_sampler(void*) {}
}  // namespace

void LlamaRuntime::share_prefix(std::int32_t src, std::int32_t dst, std::int32_t n) {
  llama_memory_t mem = llama_get_memory(ctx_);
  if (!per_seq_) {
    llama_memory_seq_cp(mem, src, dst, 0, n);
    return;
  }
  // Between KV streams llama.cpp copies whole streams (queued until the next decode); then the
  // copy is cut back to the prefix.
  llama_memory_seq_cp(mem, src, dst, -1, -1);
  llama_memory_seq_rm(mem, dst, n, -1);
  note_stream_copy(src, dst);
}

void LlamaRuntime::note_stream_copy(std::int32_t src, std::int32_t dst) {
  copy_pending_[static_cast<size_t>(src)] |= kCopySource;
  copy_pending_[static_cast<size_t>(dst)] |= kCopyDestination;
}

Status LlamaRuntime::check_no_pending_copy(std::int32_t seq, std::uint8_t role) const {
  if (seq < 0 || seq >= n_seq_max_ || (copy_pending_[static_cast<size_t>(seq)] & role) == 0) return Status::Ok();
  return Status(ErrorCode::kKvPending, role == kCopyDestination
                                           ? "the sequence's KV is still being copied in (until the next decode)"
                                           : "the sequence's stream is still being copied out (until the next decode)");
}

void LlamaRuntime::move_sequence(std::int32_t from, std::int32_t to) {
  if (from < 0 || from >= n_seq_max_ || to < 0 || to >= n_seq_max_ || from == to) return;
  llama_memory_t mem = llama_get_memory(ctx_);
  llama_memory_seq_cp(mem, from, to, -1, -1);
  llama_memory_seq_rm(mem, from, -1, -1);
  if (per_seq_) note_stream_copy(from, to);
  samplers_[static_cast<size_t>(to)] = samplers_[static_cast<size_t>(from)];
  samplers_[static_cast<size_t>(from)] = nullptr;
  greedy_[static_cast<size_t>(to)] = greedy_[static_cast<size_t>(from)];
  greedy_[static_cast<size_t>(from)] = false;
  attach_backend_sampler(to, greedy_[static_cast<size_t>(to)]);
}

void LlamaRuntime::drop_sampler(std::int32_t seq) {
  if (seq < 0 || seq >= n_seq_max_) return;
  llama_sampler*& s = samplers_[static_cast<size_t>(seq)];
  if (s != nullptr) llama_sampler_free(s);
  s = nullptr;
}

Status LlamaRuntime::save_kv(std::int32_t seq, HostBytes& out) const {
  if (Status st = check_no_pending_copy(seq, kCopyDestination); !st.ok()) return st;
  const auto t0 = std::chrono::steady_clock::now();
  const size_t need = llama_state_seq_get_size(ctx_, seq);
  out = kv_host_ ? kv_host_->take(need) : HostBytes::heap(need);
  const size_t n = llama_state_seq_get_data(ctx_, out.data(), out.size(), seq);
  spdlog::debug("kv save of sequence {}: {} bytes in {:.2f} ms", seq, n, ms_since(t0));
  if (n == 0 && !out.empty()) {
    out.clear();
    return Status(ErrorCode::kInternal, "cannot copy the sequence's KV");
  }
  out.truncate(n);
  return Status::Ok();
}

void LlamaRuntime::prepare_save(std::int32_t seq) {
  if (kv_host_ && check_no_pending_copy(seq, kCopyDestination).ok()) kv_host_->prepare(llama_state_seq_get_size(ctx_, seq));
}

Status LlamaRuntime::restore_kv(std::int32_t seq, std::span<const std::uint8_t> bytes) {
  if (bytes.empty()) return Status::Ok();
  if (Status st = check_no_pending_copy(seq, kCopySource); !st.ok()) return st;
  const auto t0 = std::chrono::steady_clock::now();
  if (llama_state_seq_set_data(ctx_, bytes.data(), bytes.size(), seq) == 0) {
    llama_memory_seq_rm(llama_get_memory(ctx_), seq, -1, -1);
    return Status(ErrorCode::kKvExhausted, "cannot restore the sequence's KV");
  }
  spdlog::debug("kv restore of sequence {}: {} bytes in {:.2f} ms", seq, bytes.size(), ms_since(t0));
  return Status::Ok();
}

Status LlamaRuntime::park_sequence(std::int32_t seq, bool save_kv_bytes, ParkedSequence& out) {
  if (seq < 0 || seq >= n_seq_max_ || samplers_[static_cast<size_t>(seq)] == nullptr) {
    return Status(ErrorCode::kInternal, "park of a sequence that is not live");
  }
  out.kv.clear();
  if (save_kv_bytes) {
    if (Status st = save_kv(seq, out.kv); !st.ok()) return st;
  }
  llama_sampler*& s = samplers_[static_cast<size_t>(seq)];
  out.sampler = std::shared_ptr<void>(s, &free_parked_sampler);
  s = nullptr;
  llama_memory_seq_rm(llama_get_memory(ctx_), seq, -1, -1);
  return Status::Ok();
}

Status LlamaRuntime::unpark_sequence(std::int32_t seq, ParkedSequence& from) {
  if (seq < 0 || seq >= n_seq_max_ || from.sampler == nullptr) return Status(ErrorCode::kInternal, "bad unpark");
  end_sequence(seq);
  // Take the chain back: disarm the deleter, then drop the owner.
  samplers_[static_cast<size_t>(seq)] = static_cast<llama_sampler*>(from.sampler.get());
  greedy_[static_cast<size_t>(seq)] = greedy_only(samplers_[static_cast<size_t>(seq)]);
  attach_backend_sampler(seq, greedy_[static_cast<size_t>(seq)]);
  *std::get_deleter<void (*)(void*)>(from.sampler) = &keep_unparked_sampler;
  from.sampler.reset();
  const Status st = restore_kv(seq, from.kv);
  from.kv.clear();
  return st;
}

void LlamaRuntime::trim_sequence(std::int32_t seq, std::int32_t n) {
  if (seq >= 0 && seq < n_seq_max_) llama_memory_seq_rm(llama_get_memory(ctx_), seq, n, -1);
}

std::int32_t LlamaRuntime::kv_tokens(std::int32_t seq) const {
  llama_memory_t mem = llama_get_memory(ctx_);
  const llama_pos hi = llama_memory_seq_pos_max(mem, seq);
  if (hi < 0) return 0;
  return hi - llama_memory_seq_pos_min(mem, seq) + 1;
}

std::int32_t LlamaRuntime::embed_max_tokens() const {
  // The model's trained context, at most 8192: an embeddings context holds one pass's inputs.
  const std::int32_t trained = llama_model_n_ctx_train(model_);
  return std::min<std::int32_t>(trained > 0 ? trained : kFallbackContext, 8192);
}

Status LlamaRuntime::embed(std::span<const std::vector<Token>> inputs, std::vector<std::vector<float>>* out) {
  if (!embedder_) {
    Status st;
    embedder_ = Embedder::open(model_, embed_max_tokens(), n_threads_, &st);
    if (!embedder_) return st;
  }
  for (const auto& in : inputs) {
    for (Token t : in) {
      if (!valid_token(t)) return Status(ErrorCode::kBadRequest, "token " + std::to_string(t) + " is not in the vocabulary", "input");
    }
  }
  return embedder_->embed(inputs, out);
}

std::string LlamaRuntime::describe() const {
  char desc[256];
  llama_model_desc(model_, desc, sizeof desc);
  return std::string(desc) + ", " + std::to_string(llama_model_n_params(model_) / 1000000) + "M params, n_ctx " +
         std::to_string(n_ctx_) + (n_ctx_why_.empty() ? "" : " (" + n_ctx_why_ + ")") + (per_seq_ ? " (per-sequence KV: room per request " + std::to_string(n_ctx_seq_) + " cells)" : std::string(" (unified KV)")) + ", n_batch " + std::to_string(n_batch_) + ", sequences " +
         std::to_string(n_seq_max_) + ", threads " + std::to_string(llama_n_threads(ctx_)) +
         (backend_greedy_.empty() ? "" : ", greedy sampled on the device") + "; weights: " + placement_;
}

}  // namespace uma

namespace uma {

Decoder::Shape LlamaRuntime::shape() const {
  Shape s;
  s.weight_bytes = static_cast<double>(llama_model_size(model_));
  s.params = static_cast<double>(llama_model_n_params(model_));
  s.n_layer = llama_model_n_layer(model_);
  s.n_embd = llama_model_n_embd(model_);
  const double heads = std::max(1, llama_model_n_head(model_));
  // K and V in f16 (the cache type umad creates), n_head_kv heads of n_embd / n_head each.
  s.kv_bytes_per_cell = 2.0 * 2.0 * s.n_layer * s.n_embd / heads * llama_model_n_head_kv(model_);
  return s;
}

}  // namespace uma
