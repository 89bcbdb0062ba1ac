// Batch building: turns a TickPlan into the entries of one decode and records, for every entry
// that asks for logits, which session owns that row. This mapping is the only way the scheduler
// reads logits, so a row can never be sampled for the wrong session.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "runtime/decoder.h"
#include "sched/policy.h"
#include "sched/session.h"

namespace uma {

struct LogitsRow {
  Session* session = nullptr;
  std::int32_t batch_index = 0;
  std::int32_t draft = 0;  // 0: the session's own row; i > 0: the row fed its i-th draft token
};

struct PrefillChunk {
  Session* session = nullptr;
  std::int32_t length = 0;
};

struct BuiltBatch {
  std::vector<BatchEntry> entries;
  std::vector<LogitsRow> rows;          // in batch order
  std::vector<Session*> decoded;        // sessions that fed back their last token
  std::vector<PrefillChunk> prefilled;  // chunks of prompt fed this tick
  // Decode rows computed for sessions that ended before they were read (a pipelined decode's):
  // gone from rows and decoded, still in entries and in the tick's cost.
  std::int32_t dropped_rows = 0;
  struct Item {
    std::size_t index = 0;     // into the plan's candidates
    std::int32_t prefill = 0;  // chunk length; 0: a decode row
  };
  std::vector<Item> items;  // scratch
  void clear() { entries.clear(); rows.clear(); decoded.clear(); prefilled.clear(); dropped_rows = 0; }
  std::int32_t decode_rows() const { return static_cast<std::int32_t>(decoded.size()) + dropped_rows; }
};

// `order` holds the sessions the candidates were made from, index for index. A decoding session
// with draft tokens (Session::draft) feeds them after its last token, each with a logits row.
// Entries go in sequence-id order (see the .cc for why), each session's tokens together; a chunk
// asks for logits only on its last token and only if it completes the prompt (intermediate chunks
// need no logits).
void build_batch(const TickPlan& plan, std::span<Session* const> order, BuiltBatch& out);

}  // namespace uma
