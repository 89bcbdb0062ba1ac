// Stream batch: the order one decode's entries are given to llama.cpp when every sequence has a
// KV stream of its own (per-sequence KV), and the filler entries that keep its decode rows in one
// pass. Pure functions over BatchEntry; LlamaRuntime applies them (the scheduler never sees them).
//
// Why. With several KV streams llama.cpp cuts a batch into passes (`split_equal(sequential)` in
// llama-batch.cpp): a pass is the longest chain of *consecutive* sequence ids found scanning the
// batch in order, taking the same number of tokens from each (as many as the shortest has). Every
// pass is a graph of its own, built anew on the host (no CUDA graph): ~3 ms of host time on a 1B
// model on a GPU. And its outputs come out pass by pass; where that is not the batch's order,
// llama.cpp swaps whole output rows (n_vocab floats in four host buffers per swap, most of 64
// rows when one prompt sat among the decode rows) before the first token is read.
//
// So:
// - First the first entry of every sequence, in id order (decode rows, and the first token of
//   each prompt chunk), then the rest of each chunk, by id. The decode rows leave in the first
//   pass(es), in batch order: no output swaps.
// - A sequence far deeper than the rest may go in a pass of its own (deep_pass_row_cells).
// - An id between two of those first entries that is not in the batch would end the chain (a new
//   pass). It gets a filler: one entry, no output, at the position after its last one; the caller
//   removes it from the KV again after the decode. A filler costs one row of the pass (~0.05 ms on
//   that GPU), not a pass; runs longer than `max_filler_run` ids are left as gaps.
// - Prompt chunks whose sequence ids are consecutive share their later passes only when their
//   rests are equally long: the shorter ones are padded (entries with no output at the positions
//   after their chunk, removed from the KV after the decode, as fillers are), where that costs
//   fewer entries than the passes it saves are worth (pad_entries_per_pass). Three prompts of
//   slightly unequal length beside 64 decode rows then take two passes, not four.
// - With first_entries_output, the first pass's entries all have outputs (see the option).
// - Last, the entries go in the order the passes will output them (llama_passes): each pass's
//   sequences' entries together. A verifying tick's rows (every sequence's decode row and drafts,
//   all outputs, one pass) otherwise came out sequence by sequence from a batch ordered first
//   rows first: measured on a GPU (8B, 16 streams of 1 + 4 rows), 5.2 ms of host time swapping
//   rows after each 12.7 ms decode.
//
// Thread-safety: none needed (no state). Contract: entries of one sequence are in position order
// (llama.cpp's rule), and stay so here.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "runtime/decoder.h"

namespace uma {

struct StreamFiller {
  std::int32_t seq = 0;
  std::int32_t pos = 0;  // the KV position written, removed after the decode
};

struct StreamBatch {
  std::vector<BatchEntry> entries;    // llama_decode's input
  std::vector<std::int32_t> index_of;  // caller's entry index -> index in `entries`
  std::vector<StreamFiller> fillers;   // filler entries in `entries`
  std::vector<StreamFiller> pads;      // each padded chunk's first padding position (removed from there on)
  std::int32_t pad_entries = 0;        // padding entries in `entries`, all chunks
  std::int32_t deep_seq = -1;          // the sequence given a pass of its own, or -1
};

struct StreamBatchOptions {
  // The position a filler for sequence `seq` (not in the batch) may take, or -1 when it must not
  // get one (no room in its stream, a copy into it pending, a model whose KV a filler would alter).
  std::function<std::int32_t(std::int32_t seq)> filler_pos;
  Token filler_token = 0;
  std::int32_t max_filler_run = 32;  // longest run of missing ids filled
  std::int32_t max_entries = 0;      // fillers never take the batch over this (n_batch)
  // llama.cpp sizes the attention of every stream in a pass to the deepest one's cells
  // (llama_kv_cache::get_n_kv: their used cells, padded to 256), so one deep sequence makes every
  // row beside it attend over its depth. It gets a pass of its own when (the other sequences) x
  // (its extra padded cells) reaches this, and its id is the batch's lowest or highest (placed
  // last or first, no id chain joins it; one in the middle would cut the chain in two). 0: never
  // (a GPU, where a pass costs more than attention; on a CPU a pass is a read of the weights).
  std::int64_t deep_pass_row_cells = 0;
  std::int32_t n_ubatch = 0;  // llama.cpp's, which bounds a pass (0: unbounded)
  // Padding prompt chunks (needs filler_pos, whose rule a pad follows: a model whose KV it would
  // alter has none): the most entries spent to save one pass (0: never), the most entries a batch
  // may hold (n_batch), and a sequence's cells (a pad's position must be below it).
  std::int32_t pad_entries_per_pass = 0;
  std::int32_t max_batch = 0;
  std::int32_t seq_cells = 0;
  // Every first entry and filler asks for an output (which the caller never reads): the first
  // pass over the same ids then has the same outputs whether or not prompts start in it, which
  // llama.cpp needs to reuse its graph (it compares every row's output flag). An output row costs
  // a row of the output matmul; a rebuilt graph ~7 ms of host time on a GPU.
  bool first_entries_output = false;
};

// llama.cpp's passes over `entries` (split_equal(n_ubatch, sequential=true) in the pinned
// llama-batch.cpp), each its entries' indices in the order its outputs come out: a pass is the
// chain of consecutive sequence ids met scanning the unused entries in order, and takes as many
// entries from each as the one with fewest left has (at most n_ubatch in all; 0: unbounded).
std::vector<std::vector<std::int32_t>> llama_passes(std::span<const BatchEntry> entries, std::int32_t n_ubatch);

void arrange_for_streams(std::span<const BatchEntry> in, const StreamBatchOptions& options, StreamBatch& out);

}  // namespace uma
