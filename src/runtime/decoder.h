// Decoder: what the scheduler needs from a model, and nothing more.
//
// The scheduler (sched/) drives generation through this interface so that batch building and
// logits-row mapping can be tested against a fake, and so that sched/ never includes llama.h.
// The real implementation is LlamaRuntime (runtime/llama_runtime.h).
//
// Contract:
// - Single-threaded: every call comes from the compute thread that owns the decoder.
// - With an asynchronous decode, sequences may change (end, trim, move, keep) while a decode that
//   holds rows of theirs is in flight; those rows are then never sampled.
// - Sequences are small integers in [0, n_seq_max()). start_sequence() must precede decode() entries
//   for a sequence; end_sequence() frees its KV cells and sampler and may be called at any time.
// - decode() submits one batch (one llama_decode). After it returns ok, sample(seq, i) is valid only
//   for batch indices i whose entry asked for logits; indices refer to positions in that batch. A
//   row may be left unsampled when trim_sequence() then removes its entry (a rejected draft).
//   kKvExhausted means no KV cells were found for the batch and nothing changed (retry smaller).
// - park_sequence() takes a sequence out (preemption): its sampler, with all its state, moves into
//   the ParkedSequence, its KV cells are copied out when asked and then freed. unpark_sequence()
//   puts both back under any free sequence id.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "runtime/host_bytes.h"
#include "serve/sampling.h"
#include "serve/token.h"

namespace uma {

struct BatchEntry {
  Token token = 0;
  std::int32_t pos = 0;   // position within its sequence
  std::int32_t seq = 0;   // sequence id
  bool logits = false;    // ask for this entry's logits row
  // An image's position (serve/request.h's PromptImage): its input embedding, n_embd floats, read
  // instead of the token (a stand-in). A sequence's entries in one decode are all images or all tokens.
  const float* embd = nullptr;
};

// A sequence taken off the KV cache. Move-only in practice; the scheduler treats it as opaque.
struct ParkedSequence {
  HostBytes kv;                   // the sequence's KV cells; empty: dropped, to be recomputed
  std::shared_ptr<void> sampler;  // the sampler chain (RNG, penalty history), freed by its deleter
  std::size_t bytes() const { return kv.size(); }
};

class Decoder {
 public:
  virtual ~Decoder() = default;

  virtual std::int32_t n_batch() const = 0;    // most entries one decode() accepts
  // Entries llama.cpp evaluates in one pass at most (n_ubatch; a larger decode is cut into passes):
  // the unit of a tick with streams decoding. n_batch() above it only lets a tick with nobody
  // decoding take a burst of prompts in at once.
  virtual std::int32_t n_ubatch() const { return n_batch(); }
  virtual std::int32_t n_ctx() const = 0;      // KV cells shared by all sequences
  virtual std::int32_t n_seq_max() const = 0;  // distinct sequences
  // The KV layout. Unified: one pool of n_ctx() cells every sequence draws from (a request may use
  // all of it). Per-sequence (llama.cpp's KV streams): each sequence id owns n_ctx_seq() cells of
  // its own, and a decode's attention spans only its own sequence's cells instead of every cell in
  // use; llama.cpp evaluates a batch in one pass only over a run of consecutive sequence ids, so
  // the scheduler keeps running sequences dense (move_sequence) and the runtime fills what gaps
  // remain (runtime/stream_batch.h). decode() may reorder entries for llama.cpp; batch indices in
  // sample() and logits rows stay the caller's.
  virtual bool kv_per_sequence() const { return false; }
  virtual std::int32_t n_ctx_seq() const { return n_ctx(); }  // the most cells one sequence holds
  // The most logits rows one sequence may ask for in a decode (0: no limit). llama.cpp's sampling
  // on the device takes as many as it was told at creation: one leaves nothing to verify drafts.
  virtual std::int32_t outputs_per_sequence() const { return 0; }
  // The most logits rows one decode may ask for, all sequences together, without llama.cpp
  // growing its output buffer while serving (0: no bound kept). A verifying tick stays within it.
  virtual std::int32_t outputs_reserved() const { return 0; }

  // Tokenizes text (BOS added when the model wants it). Control tokens written as text are parsed
  // only when parse_special (a rendered chat template); never in user text.
  virtual Status tokenize(std::string_view text, std::vector<Token>& out, bool parse_special = false) const = 0;
  // Bytes of a token's text; may be a fragment of a UTF-8 code point.
  virtual std::string piece(Token token) const = 0;
  virtual bool valid_token(Token token) const { return token >= 0; }  // in the vocabulary
  virtual bool is_end_of_generation(Token token) const = 0;

  virtual Status start_sequence(std::int32_t seq, const SamplingParams& params) = 0;
  // Per-sequence KV: starts a request on a sequence that holds a kept prefix (its sampler was
  // dropped), keeping positions [0, keep) and removing the rest: the prefix is reused where it is,
  // with nothing copied. On error the sequence is unchanged.
  virtual Status adopt_sequence(std::int32_t seq, const SamplingParams& params, std::int32_t keep) = 0;
  virtual void end_sequence(std::int32_t seq) = 0;
  virtual Status decode(std::span<const BatchEntry> batch) = 0;
  // Whether decode() returns once the work is queued on a device, the host free until results are
  // read (sample() and logits() wait for them). The scheduler then launches a decode-only batch
  // before it turns the last one's tokens into text and events (its pipelined tick).
  virtual bool decode_is_async() const { return false; }
  // Waits until the last decode's results are on the host (a tick's true time is measured to here).
  virtual void synchronize() {}
  virtual Token sample(std::int32_t seq, std::int32_t batch_index) = 0;
  // The logits row of a batch index of the last decode, when it is on the host (empty when the
  // token was sampled on the device, or the decoder keeps none). Valid until the next decode.
  virtual std::span<const float> logits(std::int32_t /*batch_index*/) { return {}; }
  // Makes positions [0, n) of `src` also part of `dst` (empty): in a unified KV the cells are
  // shared, not copied; per sequence they are copied (on the device, before the next decode).
  virtual void share_prefix(std::int32_t src, std::int32_t dst, std::int32_t n) = 0;
  // Per-sequence KV: the KV and sampler of `from` move to the free id `to`; `from` is free after.
  // Per sequence, the copies of share_prefix and move_sequence happen on the device at the start
  // of the next decode: until then save_kv of the copy's destination and restore_kv into its
  // source answer kKvPending (the caller drops or recomputes instead).
  virtual void move_sequence(std::int32_t from, std::int32_t to) = 0;
  // Frees a sequence's sampler but keeps its KV (a finished sequence kept for prefix reuse).
  virtual void drop_sampler(std::int32_t seq) = 0;
  // A sequence's KV cells as bytes (host snapshot, in memory the decoder picks: host_bytes.h),
  // and back into an empty sequence. A restore that finds no room leaves the sequence empty and
  // returns kKvExhausted.
  virtual Status save_kv(std::int32_t seq, HostBytes& out) const = 0;
  virtual Status restore_kv(std::int32_t seq, std::span<const std::uint8_t> bytes) = 0;
  // A hint: save_kv(seq) is likely to come (a kept prefix now worth host memory). A decoder whose
  // snapshot memory is slow to get may get it ready in the background.
  virtual void prepare_save(std::int32_t /*seq*/) {}
  // Bytes park_sequence(seq, true) would copy out.
  virtual std::size_t kv_state_bytes(std::int32_t seq) const = 0;
  // Frees `seq` (KV cells and id); keeps its sampler, and its KV bytes when save_kv. On error the
  // sequence is untouched.
  virtual Status park_sequence(std::int32_t seq, bool save_kv, ParkedSequence& out) = 0;
  // Restores a parked sampler under `seq` (which must be free), then its saved KV if any. When the
  // KV cannot be restored the sampler is still in place, the sequence is empty and the result is
  // an error: recompute instead.
  virtual Status unpark_sequence(std::int32_t seq, ParkedSequence& from) = 0;
  // Removes positions [n, end) of a sequence from the KV cache (a verified draft's rejected tokens;
  // what a finished speculating session holds past its tokens). Its sampler is untouched.
  virtual void trim_sequence(std::int32_t seq, std::int32_t n) = 0;
  // Tokens the KV cache holds for a sequence (0 when empty). For metrics and leak checks.
  virtual std::int32_t kv_tokens(std::int32_t seq) const = 0;

  // Pooled, L2-normalised embeddings of whole token sequences, one per input (runtime/embedder.h:
  // a second context on the same weights, made on first use). Inputs are 1..embed_max_tokens()
  // tokens each. A decoder that cannot embed says so.
  virtual Status embed(std::span<const std::vector<Token>> /*inputs*/, std::vector<std::vector<float>>* /*out*/) {
    return Status(ErrorCode::kBadRequest, "this daemon serves no embeddings", "input");
  }
  virtual std::int32_t embed_max_tokens() const { return 0; }
  // The threads a decode computes with on the host (0: no host thread pool). set_threads() takes
  // effect at the next decode and never changes what a decode computes (sched/thread_governor.h).
  virtual std::int32_t threads() const { return 0; }
  virtual void set_threads(std::int32_t /*n*/) {}
  // Whether a decode's work runs on the host's cores (its layers on the CPU): then its CPU time
  // over its wall time tells whether its threads had their cores.
  virtual bool computes_on_host() const { return false; }
  // Per-sequence KV: prompt chunks of consecutive sequence ids share passes (padded to one length,
  // runtime/stream_batch.h), so prompts that start together are worth placing at consecutive ids.
  virtual bool pads_prompt_chunks() const { return false; }
  // Per-sequence KV: passes of a recurring shape replay a kept graph (llama_set_graphs_kept), and
  // a prompt pass's shape includes its sequence ids, so prompts starting are placed at the lowest
  // ids: the same number of chunks of the same length is then the same graph.
  virtual bool keeps_pass_graphs() const { return false; }
  // What a token costs to move and compute (sched/tick_cost.h); zeros when unknown (fakes).
  struct Shape {
    double weight_bytes = 0, params = 0, n_layer = 0, n_embd = 0, kv_bytes_per_cell = 0;
  };
  virtual Shape shape() const { return {}; }
};

}  // namespace uma
