// DraftModel: a llama.cpp model drafting for speculative decoding (runtime/drafter.h), beside the
// target the LlamaRuntime serves (umad --draft-model). It must share the target's vocabulary:
// open() compares their sizes and special tokens and refuses another.
//
// Its own context: one unified KV pool over the target's sequence ids (a small model's cells cost
// little: 64 dims and 2 layers is 512 bytes a token), greedy proposals read on the host. Each
// sequence remembers the tokens it fed; a call feeds only what differs from them (positions past
// the common prefix are removed first), in batches of every job's catch-up together, then one
// step per proposed token with every job still drafting in it. On a GPU a lone job's catch-up of
// a few tokens goes one token a decode (one_token_catch_up): every decode of the call then has
// the steps' shape, whose CUDA graph llama.cpp replays; a batch of another shape makes it run the
// next two decodes eagerly and capture the graph again (measured on a GPU with the tiny draft:
// a call after a fully accepted tick, two tokens to feed, 1.62 ms against 0.85). Step times are measured (EWMA, by
// the step's rows; a call's cost beyond its steps by its jobs).
//
// Thread-safety: compute thread only. Ownership: owns its model and context, freed on destruction.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/bucketed_ewma.h"
#include "runtime/drafter.h"

struct llama_context;
struct llama_model;
struct llama_vocab;

namespace uma {

struct DraftConfig {
  std::string model_path;
  std::int32_t n_ctx = 4096;   // cells of its KV pool, every sequence together
  std::int32_t n_seq_max = 16;
  std::int32_t n_batch = 512;
  std::int32_t n_threads = 0;  // 0: all hardware threads
  std::int32_t n_gpu_layers = -1;  // as RuntimeConfig's
  // A lone job's catch-up of what a tick can accept (k + 1 tokens at most) fed one token a decode;
  // unset: where the draft runs on a GPU (on a CPU a decode's cost is its weights, read once for the batch).
  std::optional<bool> one_token_catch_up;
};

class DraftModel final : public Drafter {
 public:
  // Loads the draft; `target` is the served model's vocabulary, which the draft's must equal.
  static std::unique_ptr<DraftModel> open(const DraftConfig& config, const llama_vocab* target, Status* status);
  ~DraftModel() override;
  DraftModel(const DraftModel&) = delete;
  DraftModel& operator=(const DraftModel&) = delete;

  Status draft(std::span<const DraftJob> jobs) override;
  void forget(std::int32_t seq) override;
  double step_ms(std::size_t rows) const override { return step_ms_.value(rows); }
  double call_ms(std::size_t jobs) const override { return call_ms_.value(jobs); }
  void decay_costs(std::size_t jobs, double factor) override {
    step_ms_.decay(jobs, factor);
    call_ms_.decay(jobs, factor);
  }
  std::size_t lag(std::int32_t seq, std::span<const Token> tokens) const override;
  double catch_up_ms(std::size_t tokens) const override;
  void set_threads(std::int32_t n) override;
  std::string describe() const;
  std::size_t decodes() const { return decodes_; }  // llama_decode calls since open(), warm-up's aside

 private:
  DraftModel() = default;
  // One llama_decode of the batch built so far; the measured time feeds step_ms when `step`
  // (a step after the first: the first's graph is new). Returns its ms in `*ms` when `step`.
  Status decode(bool step, double* ms);
  void clear();  // drops every sequence's cells (after an error)
  void warm_up();  // one decode of each shape a call makes, nothing kept
  // draft()'s steps: every job's catch-up, then the steps; a row added to the batch; the batch
  // decoded and its proposals read.
  struct DraftCall;
  Status catch_up(DraftCall& call, std::span<const DraftJob> jobs);
  Status run_steps(DraftCall& call);
  void add_row(Token t, std::int32_t pos, std::int32_t seq, bool logits);
  Status flush(DraftCall& call, bool step);

  llama_model* model_ = nullptr;
  llama_context* ctx_ = nullptr;
  std::int32_t n_vocab_ = 0;
  std::int32_t n_batch_ = 0;
  bool one_token_catch_up_ = false;
  std::size_t decodes_ = 0;
  std::vector<std::vector<Token>> fed_;  // per sequence: the tokens its cells hold, from position 0
  // The batch being built (llama_batch's arrays, owned here).
  std::vector<Token> tok_;
  std::vector<std::int32_t> pos_, n_seq_id_;
  std::vector<std::int32_t> seq_;
  std::vector<std::int32_t*> seq_ptr_;
  std::vector<std::int8_t> logits_;
  std::int32_t n_ = 0;
  BucketedEwma step_ms_;  // a steady step's, by its rows (the first after a catch-up builds its graph: call_ms_)
  BucketedEwma call_ms_;  // a steady call's time beyond its steps, by its jobs (not a prompt's catch-up)
  // A prompt's catch-up: ms a token (warm_up's, then an EWMA of calls feeding prompts) and the
  // cells the pool held meanwhile. Every token's attention runs over the one pool's cells in use
  // (measured on a CPU at 16 streams: 0.06 ms a token beside 500 cells, 0.14 beside 2,200), so a
  // prediction scales the rate by the cells it will run beside.
  double catch_up_ms_per_token_ = 0.0;
  double catch_up_cells_ = 0.0;
  int catch_up_calls_ = 0;
  std::size_t cells_in_use() const;  // every sequence's fed tokens
  // How many of `tokens` a sequence that was fed `fed` keeps: the common prefix, the last token
  // aside (what draft() feeds, and lag() counts).
  static std::size_t kept(const std::vector<Token>& fed, std::span<const Token> tokens);
};

}  // namespace uma
