// Greedy sampling on the device for every sequence of a batch with one argmax, ends masked where
// a request ignores them.
//
// llama.cpp's backend sampling gives each sequence id its own sampler chain and builds each into
// the decode's graph on a one-row view of the logits; its greedy sampler is one ggml_argmax per
// row (every attached sampler adds its nodes to each graph; those of sequences with an output row
// are computed). On a GPU that is one single-row argmax kernel per stream over the vocabulary,
// one after another: measured on an
// a GPU (1B Q8_0, 32k vocabulary, 64 streams) 4.94 ms of device time per decode against 4.11 with
// the one shared argmax here (UMA_DEVICE_GREEDY=row brings the per-row kernels back, to compare).
// The samplers made here share one argmax over the whole logits matrix per graph (one kernel,
// every row in parallel) and each hands llama.cpp its own row of the result. They rely on how the
// pinned llama.cpp builds sampling (llm_graph_context::build_sampling: every sampler gets a 1-D
// view of one padded logits tensor, and backend_reset is called on all of them before any apply);
// where the view is not of that shape they fall back to an argmax of their own row.
//
// They hand llama.cpp no logits: its samplers leave each row's view as the sampler's "logits"
// output, which llama.cpp then copies to the host row by row (a vocabulary of floats per stream
// per tick, one copy call each) although a greedy pick needs nothing but the token id.
//
// A request that ignores end-of-generation tokens (ignore_eos) is still greedy: the shared argmax
// runs over the logits with the end tokens' columns lowered by a per-row amount, 0 or -inf, a
// graph input written from each row's owner's flag every time the graph runs. Whether a sequence
// ignores ends is a value, not a different sampler, so a request of either kind takes a sequence
// id without detaching its sampler, which would make llama.cpp re-reserve its graphs (40-50 ms on
// an 8B model).
//
// The shared state is the last built graph's: a graph kept beside it (llama_set_graphs_kept) and
// run again keeps the end amounts it last wrote. So the runtime drops the kept graphs whenever a
// sequence's flag changes (LlamaRuntime::set_chain), and they are built again with it.
//
// Thread-safety: as the llama_context that uses them (compute thread only).
// Ownership: make_device_greedy() returns a sampler chain the caller frees (after the context
// that uses it); all of them point at one DeviceGreedyShare, which must outlive them.
#pragma once

#include <cstdint>
#include <vector>

struct ggml_tensor;
struct llama_sampler;

namespace uma {

struct DeviceGreedyShare {
  // Set before the first sampler is made.
  bool per_row = false;               // one argmax per sampler instead (UMA_DEVICE_GREEDY=row, to compare)
  // Let llama.cpp copy each row's logits to the host anyway (UMA_DEVICE_GREEDY=copy, to compare
  // the cost; those rows show the end mask's -inf where their request ignores ends).
  bool copy_logits = false;
  std::vector<std::int32_t> end_tokens;  // the vocabulary's end-of-generation ids (none: no mask is built)
  // By sequence id, set by the runtime between decodes: its rows never pick an end token.
  std::vector<std::uint8_t> ignore_end;

  // The graph being built (reset by llama.cpp before each build).
  ggml_tensor* logits = nullptr;      // its logits matrix
  ggml_tensor* argmax = nullptr;      // its argmax per row (I32)
  ggml_tensor* mask = nullptr;        // its rows' amounts for the end tokens' columns (input, F32)
  std::vector<std::int32_t> row_seq;  // its rows' sequence ids (-1: a row no sampler here took)
  std::vector<std::int32_t> row0_claims;  // sequences given row 0: its owner, and those with no row
  std::vector<float> mask_rows;       // what set_input writes into `mask`
  std::uint64_t decodes = 0;          // bumped by the runtime before each llama_decode
  std::uint64_t mask_written = 0;     // `decodes` when `mask` was last written (0: not since its build)

  // Ends can be masked on the device (else a request ignoring them samples on the host).
  bool can_mask() const { return !end_tokens.empty(); }
};

// A one-sampler chain for sequence `seq` whose CPU path is greedy (masked as the device's) and
// whose device path reads `share`'s argmax.
llama_sampler* make_device_greedy(DeviceGreedyShare* share, std::int32_t seq);

}  // namespace uma
