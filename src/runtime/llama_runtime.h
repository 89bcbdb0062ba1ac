// LlamaRuntime: one llama.cpp model and one context, owned for the daemon's lifetime (RAII).
//
// The context's KV cache is unified (one pool shared by n_seq_max sequences) or per sequence
// (RuntimeConfig::kv_layout); each active request holds one sequence id. Implements Decoder for
// the scheduler.
// Thread-safety: none. Construct, use and destroy on the compute thread (llama contexts are not
// thread-safe). The model's memory (mmap'd or read) is shared by every sequence.
// Files: llama_runtime_open.cc (loading), llama_runtime.cc (decode, sampling, tokens),
// llama_runtime_kv.cc (a sequence's KV: copies, save/restore, park, trim).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "runtime/context_size.h"
#include "runtime/decoder.h"
#include "runtime/device_greedy.h"
#include "runtime/stream_batch.h"
#include "runtime/image_loader.h"
#include "runtime/kv_host_pool.h"
#include "store/model_image.h"

struct llama_model;
struct llama_context;
struct llama_vocab;
struct llama_sampler;
struct llama_model_params;
struct llama_context_params;
struct llama_sampler_seq_config;

namespace uma {
class Embedder;
}
struct llama_batch;

namespace uma {

struct RuntimeConfig {
  std::string model_path;
  // When set, the weights come from this image (the model store's, possibly still filling) through
  // runtime/image_loader.h instead of llama.cpp reading model_path; model_path then only names it.
  std::shared_ptr<store::ModelImage> image;
  ImageLoadPath image_load = ImageLoadPath::kAuto;
  std::int32_t n_ctx = 4096;  // <= 0: the model's trained context, or the largest whose KV fits (context_size.h)
  // What the KV may take, bytes: an automatic n_ctx fits it, an explicit one must (open fails
  // otherwise). < 0: derived from the machine (context_size.h, kv_budget_bytes).
  std::int64_t kv_budget_bytes = -1;
  // Most tokens one decode takes; 0: 2048 (a burst of prompts arriving while nobody decodes goes in
  // at once, as llama-server's default, so the streams start in step). Passes stay n_ubatch long; a
  // tick with streams decoding holds one pass on the CPU, up to n_batch on a GPU (Scheduler).
  std::int32_t n_batch = 0;
  std::int32_t n_ubatch = 512;
  std::int32_t n_seq_max = 16;
  std::int32_t n_threads = 0;  // 0: all hardware threads
  bool use_mmap = true;
  bool use_mlock = false;
  // A model file already in host memory (tmpfs, a memfd) goes to a GPU by a pinned copy
  // (load_model_from_host_file) rather than llama.cpp's upload of its mapping.
  bool host_copy = true;
  FlashAttention flash_attn = FlashAttention::kAuto;  // auto: llama.cpp's choice (choose_flash_attention)
  // Layers whose weights (and KV) go to the GPU: -1 all of them when llama.cpp was built with a
  // GPU backend (CUDA, Metal, ...), none otherwise; 0 none; N the first N.
  std::int32_t n_gpu_layers = -1;
  // Per-sequence KV: a sequence deeper than the others by this many padded cells times their
  // number gets a pass of its own (runtime/stream_batch.h); -1: 2048 with the weights on the CPU,
  // 0 (never) on a GPU.
  std::int64_t deep_pass_row_cells = -1;
  // Per-sequence KV: the most padding entries a decode spends to save one pass, where prompt chunks
  // of consecutive ids are padded to one length (runtime/stream_batch.h); -1: 64 on a GPU (a pass
  // there costs a few ms of host build and launch, a padded row a few us), 0 (never) on a CPU,
  // where a row costs far more.
  std::int32_t pad_entries_per_pass = -1;
  // Built graphs llama.cpp keeps beside the last one (llama_set_graphs_kept), each with compute
  // buffers of its own: a tick's decode rows and prompt chunks then both replay their graphs (a
  // rebuilt pass costs ~7 ms of host work on a GPU, a replayed one under 1). Off by default: on a
  // GPU it helped a mixed load (8B) and cost c=64 (1B) its tail (docs/BENCHMARKS.md).
  std::int32_t graphs_kept = 0;
  // unified: one KV pool shared by every sequence; per-seq: a private stream per sequence, whose
  // attention then spans only its own cells (see Decoder); auto: per-seq with more than one
  // sequence. With a unified KV every row's attention spans every cell in use: a prompt chunk
  // beside 16 streams on a CPU cost twice what it costs alone (docs/BENCHMARKS.md), and
  // on a GPU it is what a 64-stream tick spends its time on.
  // Per-seq room: each of the n_seq_max streams holds n_ctx / n_seq_max cells (llama-server's
  // -c / -np). With n_ctx <= 0 the room is the trained context, or the largest for which every
  // stream's KV fits the budget.
  KvLayout kv_layout = KvLayout::kAuto;
  // Greedy requests sampled on the device: llama.cpp's backend sampler (an argmax in the decode's
  // own graph) picks the token, and only token ids cross to the host, not a logits row of n_vocab
  // floats per stream (at 64 streams and a 32k vocabulary, 8 MB copied and scanned a tick).
  // on | off | auto (on where the output layer runs on a GPU; on a CPU the graph's argmax is no
  // faster than the host's, and every attached sampler adds its nodes to each graph).
  DeviceSampling backend_sampling = DeviceSampling::kAuto;
  // Ids [0, n) get a device sampler (0: all); a unified KV's ids above them hold kept prefixes.
  std::int32_t n_seq_sampling = 0;
  // Device sampling: the most rows one sequence may sample in a decode. Speculation verifies a
  // session's K drafts with K + 1 rows, each picked on the device (draft max + 1); 1 otherwise.
  std::int32_t outputs_per_seq = 1;
  // Logits rows one decode may ask for (a verifying tick: every stream's row and its drafts),
  // reserved at open where the output buffer is page-locked (a GPU), between n_seq_max and
  // n_ubatch; 0: none (llama.cpp grows the buffer when a decode first needs more).
  std::int32_t verify_outputs = 0;
  // KV snapshots (prefixes, paused requests) on a GPU: page-locked once, when the first snapshot
  // is coming (the process's first runtime sizes it; runtime/kv_host_pool.h), so serving then
  // never page-locks while they fit.
  // 0: none. UMA_KV_HOST_ARENA_MB overrides it.
  std::uint64_t kv_host_arena_bytes = std::uint64_t{1} << 30;
  // Per-sequence KV: each decode's entries ordered, and missing ids filled, for llama.cpp's split
  // (runtime/stream_batch.h); false gives llama.cpp the batch as it comes (for comparison).
  bool stream_batches = true;
};

// Routes llama.cpp's own log lines to spdlog (debug level unless they are warnings or errors).
// Call once before loading anything. Idempotent.
void init_llama_backend();
// init_llama_backend, then a context on every GPU (a small buffer allocated and freed), so a later
// load does not wait for the driver's start. Returns the number of GPUs warmed.
int warm_gpu_backends();

class LlamaRuntime final : public Decoder {
 public:
  // Loads the model and creates the context; on failure returns nullptr and sets *status.
  static std::unique_ptr<LlamaRuntime> open(const RuntimeConfig& config, Status* status);
  ~LlamaRuntime() override;
  LlamaRuntime(const LlamaRuntime&) = delete;
  LlamaRuntime& operator=(const LlamaRuntime&) = delete;

  std::int32_t n_batch() const override { return n_batch_; }
  std::int32_t n_ubatch() const override { return n_ubatch_; }
  std::int32_t n_ctx() const override { return n_ctx_; }
  std::int32_t n_seq_max() const override { return n_seq_max_; }
  bool kv_per_sequence() const override { return per_seq_; }
  std::int32_t n_ctx_seq() const override { return n_ctx_seq_; }
  Status embed(std::span<const std::vector<Token>> inputs, std::vector<std::vector<float>>* out) override;
  std::int32_t embed_max_tokens() const override;
  Shape shape() const override;
  Status tokenize(std::string_view text, std::vector<Token>& out, bool parse_special = false) const override;
  bool valid_token(Token token) const override;
  // The loaded model (weights and vocabulary; read-only), for what is built from it before the
  // threads start, such as the chat templates (chat/chat_templates.h).
  const llama_model* model() const { return model_; }
  std::string piece(Token token) const override;
  bool is_end_of_generation(Token token) const override;
  Status start_sequence(std::int32_t seq, const SamplingParams& params) override;
  Status adopt_sequence(std::int32_t seq, const SamplingParams& params, std::int32_t keep) override;
  void end_sequence(std::int32_t seq) override;
  Status decode(std::span<const BatchEntry> batch) override;
  Token sample(std::int32_t seq, std::int32_t batch_index) override;
  // The logits row of a batch entry that asked for it (n_vocab floats), valid until the next decode.
  // For tests that compare the model's output across KV manipulations.
  std::span<const float> logits(std::int32_t batch_index) override;
  std::size_t kv_state_bytes(std::int32_t seq) const override;
  void share_prefix(std::int32_t src, std::int32_t dst, std::int32_t n) override;
  void move_sequence(std::int32_t from, std::int32_t to) override;
  void drop_sampler(std::int32_t seq) override;
  Status save_kv(std::int32_t seq, HostBytes& out) const override;
  void prepare_save(std::int32_t seq) override;
  Status restore_kv(std::int32_t seq, std::span<const std::uint8_t> bytes) override;
  Status park_sequence(std::int32_t seq, bool save_kv, ParkedSequence& out) override;
  Status unpark_sequence(std::int32_t seq, ParkedSequence& from) override;
  void trim_sequence(std::int32_t seq, std::int32_t n) override;
  // A GPU's decode is queued, not run, by llama_decode (a synchronised timing run is not).
  bool decode_is_async() const override { return on_gpu_ && timing_.mode != DecodeTiming::Mode::kWaited; }
  void synchronize() override;
  std::int32_t outputs_per_sequence() const override { return backend_greedy_.empty() ? 0 : outputs_per_seq_; }
  std::int32_t outputs_reserved() const override { return outputs_reserved_; }
  std::int32_t kv_tokens(std::int32_t seq) const override;
  std::int32_t threads() const override { return n_threads_; }
  void set_threads(std::int32_t n) override;
  bool computes_on_host() const override { return !on_gpu_; }
  bool pads_prompt_chunks() const override {  // as arrange_for_streams does: not where fillers would alter the KV
    return arrange_ && stream_options_.pad_entries_per_pass > 0 && stream_options_.filler_pos != nullptr;
  }
  bool keeps_pass_graphs() const override { return pads_prompt_chunks() && graphs_kept_ > 0; }

  bool backend_sampling() const { return !backend_greedy_.empty(); }
  bool on_gpu() const { return on_gpu_; }  // some layers run on a GPU backend
  // Times a sequence id's device sampler was attached or detached (each makes llama.cpp re-reserve
  // its graphs before the next decode). For metrics and tests.
  std::uint64_t sampler_switches() const { return sampler_switches_; }
  std::int32_t graphs_reused() const;  // decodes that ran llama.cpp's last graph again (for tests)
  // Filler entries given to llama.cpp so far (stream_batch.h). For tests and diagnostics.
  std::uint64_t fillers_total() const { return fillers_total_; }
  std::uint64_t pad_entries_total() const { return pad_entries_total_; }  // prompt chunks' padding (stream_batch.h)
  std::uint64_t deep_passes_total() const { return deep_passes_total_; }  // decodes that gave a deep sequence its own pass
  std::string describe() const;  // one line: model size, params, context shape
  // One line: what the weights, the KV (sessions x room) and the compute buffers take, and the
  // budget the KV was sized within.
  std::string memory_plan() const;

 private:
  LlamaRuntime() = default;

  // The image a model mapped in place uses (its pages are the weights), held while the model
  // lives so they never go back to the tier's pool (host_pool.h) for another model meanwhile.
  // A streamed model copied what it needed: it holds nothing.
  std::shared_ptr<store::ModelImage> image_;
  llama_model* model_ = nullptr;
  llama_context* ctx_ = nullptr;
  const llama_vocab* vocab_ = nullptr;
  std::vector<Token> batch_token_;     // storage for the llama_batch views, reused every decode
  std::vector<std::int32_t> batch_pos_;
  std::vector<std::int32_t> batch_nseq_;
  std::vector<std::int32_t> batch_seq_;
  std::vector<std::int32_t*> batch_seq_ptr_;
  std::vector<std::int8_t> batch_logits_;
  // Per-sequence KV: the last decode as llama.cpp got it (see stream_batch.h); its fillers are
  // taken out of the KV again right after the decode.
  bool arrange_ = false;
  StreamBatchOptions stream_options_;
  StreamBatch arranged_;
  std::int32_t row_of(std::int32_t batch_index) const;  // caller's index -> llama.cpp's
  std::int32_t filler_pos(std::int32_t seq) const;
  std::uint64_t fillers_total_ = 0;
  std::uint64_t deep_passes_total_ = 0;
  std::uint64_t pad_entries_total_ = 0;
  std::shared_ptr<KvHostPool> kv_host_;  // page-locked snapshot memory (GPU); null: heap
  std::vector<llama_sampler*> samplers_;  // by sequence id; nullptr when idle
  std::int32_t n_batch_ = 0;
  std::int32_t n_ubatch_ = 0;
  std::int32_t n_ctx_ = 0;
  std::int32_t n_seq_max_ = 0;
  std::int32_t n_ctx_seq_ = 0;
  std::string n_ctx_why_;  // how an automatic n_ctx was chosen (describe())
  std::int64_t kv_budget_ = -1;  // the budget n_ctx was chosen within (memory_plan())
  std::string kv_budget_why_;    // where the budget came from
  std::string buffers_;          // the KV and compute buffers llama.cpp made, by kind (memory_plan())
  std::unique_ptr<Embedder> embedder_;  // made on the first embeddings request
  std::int32_t n_threads_ = 1;
  bool per_seq_ = false;
  FlashAttention flash_attn_ = FlashAttention::kAuto;  // as asked of llama.cpp (describe())
  bool on_gpu_ = false;
  std::int32_t graphs_kept_ = 0;  // llama_set_graphs_kept's
  std::int32_t outputs_per_seq_ = 1;  // with device sampling (RuntimeConfig::outputs_per_seq)
  std::int32_t outputs_reserved_ = 0;  // RuntimeConfig::verify_outputs as reserved (reserve_outputs)
  // One throwaway decode asking for `rows` logits rows (over sequences 0.. as device sampling
  // allows), so that llama.cpp sizes its output buffer for them now, not mid-serving.
  void reserve_outputs(std::int32_t rows);
  // open()'s steps, in order (llama_runtime_open.cc); false with *status set where one fails.
  bool load_weights(const RuntimeConfig& config, const llama_model_params& mp, bool on_gpu, Status* status);
  bool size_context(const RuntimeConfig& config, bool on_gpu, bool per_seq, llama_context_params& cp, Status* status);
  void add_device_samplers(const RuntimeConfig& config, bool output_on_gpu, bool per_seq, llama_context_params& cp,
                           std::vector<llama_sampler_seq_config>& configs);
  bool make_context(const llama_context_params& cp, const RuntimeConfig& config, Status* status);
  void size_batch_storage();
  void set_stream_options(const RuntimeConfig& config, bool per_seq, bool on_gpu);
  // Per-sequence KV: llama.cpp queues a copy between streams until the next llama_decode, while a
  // state read or write acts at once. Until then a copy's destination must not be read (it would
  // snapshot the stream before the copy) nor its source written (the copy would carry the new
  // data): save_kv / restore_kv answer kKvPending, and the scheduler drops or recomputes instead.
  static constexpr std::uint8_t kCopySource = 1, kCopyDestination = 2;
  std::vector<std::uint8_t> copy_pending_;  // by sequence id, since the last decode
  void note_stream_copy(std::int32_t src, std::int32_t dst);
  Status check_no_pending_copy(std::int32_t seq, std::uint8_t role) const;
  std::string placement_;  // where the weights went (describe())
  std::vector<bool> greedy_;  // per sequence: its chain is greedy alone (sample() takes the argmax)
  std::vector<bool> device_pick_;  // per sequence: its chain can be picked on the device (greedy, ends maybe masked)
  void set_chain(std::int32_t seq, llama_sampler* chain);  // a sequence's chain (or none) and where it is picked
  // Backend sampling: one greedy chain per sequence id, handed to llama.cpp at context creation so
  // its graphs are reserved with them (freed after the context). A greedy request that ignores
  // end tokens keeps it (its ends are masked on the device). A sequence whose request is not
  // greedy has its device sampler detached (its logits row then comes to the host for its CPU
  // chain); attaching and detaching costs a graph reserve, so a free id keeps whatever it had last
  // and is switched only when a request of the other kind takes it.
  DeviceGreedyShare device_share_;              // one argmax per graph for all of backend_greedy_
  std::vector<llama_sampler*> backend_greedy_;  // by sequence id; empty when backend sampling is off
  std::vector<bool> attached_;                  // by sequence id: backend_greedy_ is attached
  std::vector<llama_sampler*> retired_;         // replaced chains, freed after the next decode
  std::uint64_t sampler_switches_ = 0;
  void attach_backend_sampler(std::int32_t seq, bool greedy);

  // UMA_DECODE_TIMING=1: every decode waits for the device (llama_synchronize) so that its launch,
  // its device time and the host gap before it can be told apart; a summary line every 100 calls.
  // UMA_DECODE_TIMING=pipelined: nothing waits that would not: a decode's launch is timed, then at
  // the synchronize() that needs its results the host time until then, the wait, and the period
  // between two results (a stream's gap), so pipelined ticks are seen as they run.
  struct DecodeTiming {
    enum class Mode : std::uint8_t { kOff, kWaited, kPipelined };
    Mode mode = Mode::kOff;
    bool on() const { return mode != Mode::kOff; }
    std::int64_t prev_done_ns = 0;
    std::int64_t sample_ns = 0;  // in sample() since the last decode
    // gap_ms: the host time before a waited decode, or after a pipelined one's launch until needed.
    std::vector<double> launch_ms, wait_ms, gap_ms, sample_ms, tokens, period_ms;
    int slow_logged = 0;                 // slow calls described so far (at most 400)
    std::int32_t reused_before = 0;      // llama.cpp's graph reuse count after the last call
    std::uint64_t switches_before = 0;   // sampler_switches_ after the last call
    // Pipelined: the decode launched and not yet synchronised (its batch is still in the storage).
    bool pending = false;
    std::int64_t launch_start_ns = 0, launch_end_ns = 0;
    std::size_t pending_tokens = 0;
  };
  DecodeTiming timing_;
  void report_timing();
  std::int32_t timed_decode(const llama_batch& b, std::size_t n_tokens);  // llama_decode, timed
  std::string describe_decode(const llama_batch& b, std::size_t n_tokens);  // its shape, for a slow call's line
  void note_decode_shape();  // the reuse and switch counts the next describe_decode compares with
  Token sample_row(std::int32_t seq, std::int32_t batch_index);

  // Images in a decode (llama_runtime_images.cc): their entries go to llama.cpp first, as input
  // embeddings in a llama_decode of their own (a llama_batch carries tokens or embeddings); the
  // token entries follow in another. An image row that asked for logits (a prompt that ends in
  // an image) is held here, as the second decode replaces llama.cpp's outputs.
  struct HeldRow {
    std::int32_t caller_index = 0;
    Token token = -1;           // sampled on the device, or -1
    std::vector<float> logits;  // empty: none came to the host
  };
  // The batch storage's positions, sequences and logits flags as a llama_batch of n entries; the
  // caller points it at tokens or embeddings.
  llama_batch batch_view(std::int32_t n_tokens);
  Status decode_tokens(std::span<const BatchEntry> batch);
  Status decode_images(std::span<const BatchEntry> caller_batch);
  const HeldRow* held_row(std::int32_t caller_index) const;
  Token sample_held(std::int32_t seq, const HeldRow& row);
  std::vector<float> image_embd_;                 // the image entries' embeddings, one row each
  std::vector<BatchEntry> token_entries_;         // the token entries of a decode with images
  std::vector<std::int32_t> token_index_of_;      // caller's index -> token_entries_ (-1: an image's); empty: none
  std::vector<HeldRow> held_;
};


}  // namespace uma
