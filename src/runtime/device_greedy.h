// Greedy sampling on the device for every sequence of a batch with one argmax.
//
// llama.cpp's backend sampling gives each sequence id its own sampler chain and builds each into
// the decode's graph on a one-row view of the logits; its greedy sampler is one ggml_argmax per
// row (every attached sampler adds its nodes to each graph; those of sequences with an output row
// are computed). On a GPU that is one single-row argmax kernel per stream over the vocabulary,
// one after another: measured on an
// H100 (1B Q8_0, 32k vocabulary, 64 streams) 4.94 ms of device time per decode against 4.11 with
// the one shared argmax here (UMA_DEVICE_GREEDY=row brings the per-row kernels back, to compare).
// The samplers made here share one argmax over the whole logits matrix per graph (one kernel,
// every row in parallel) and each hands llama.cpp its own row of the result. They rely on how the
// pinned llama.cpp builds sampling (llm_graph_context::build_sampling: every sampler gets a 1-D
// view of one padded logits tensor, and backend_reset is called on all of them before any apply);
// where the view is not of that shape they fall back to an argmax of their own row.
//
// Thread-safety: as the llama_context that uses them (compute thread only).
// Ownership: make_device_greedy() returns a sampler chain the caller frees (after the context
// that uses it); all of them point at one DeviceGreedyShare, which must outlive them.
#pragma once

struct ggml_tensor;
struct llama_sampler;

namespace uma {

struct DeviceGreedyShare {
  ggml_tensor* logits = nullptr;  // the logits matrix of the graph being built
  ggml_tensor* argmax = nullptr;  // its argmax per row (I32)
  bool per_row = false;           // one argmax per sampler instead (UMA_DEVICE_GREEDY=row, to compare)
};

// A one-sampler chain whose CPU path is greedy and whose device path reads `share`'s argmax.
llama_sampler* make_device_greedy(DeviceGreedyShare* share);

}  // namespace uma
