// The KV-event stream's content: which prefix blocks an agent holds, and its load, as
// the agent publishes them and a gateway reads them. The format lives here once:
// - BlockJournal: what the agent's prefix index holds (it is the index's BlockObserver) and what
//   the stream has said so far; take() coalesces every change since the last take into one delta
//   (a block stored and evicted in between is never mentioned);
// - KvEvent: one event (a snapshot for a new subscriber, then deltas), encoded as one JSON object
//   (the `data:` of an SSE event) and decoded with every field type-checked.
// Block hashes (serve/block_hash.h) are written as
// 16 hex digits (JSON numbers above 2^53 do not survive every client).
//
// Thread-safety: BlockJournal's methods may be called from any thread (the compute thread reports,
// the agent's I/O thread takes); the rest is plain data and pure functions.
#pragma once

#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "common/status.h"
#include "serve/block_hash.h"

namespace uma::cluster {

struct AgentLoad {
  std::int64_t active = 0;   // sessions prefilling or decoding
  std::int64_t queued = 0;   // admitted, waiting for KV room
  std::int64_t backlog = 0;  // prompt tokens admitted and not yet prefilled
  // Requests the agent had admitted when it measured the three above (they cover those): its
  // metrics lag a request's arrival by up to a tick, so a router cannot take a report that came
  // after its dispatch as one that includes it.
  std::int64_t admitted = 0;
  bool operator==(const AgentLoad&) const = default;
};

struct KvEvent {
  bool snapshot = false;  // true: `stored` is everything held (a new subscriber's first event)
  std::string boot_id;    // snapshot only
  std::int32_t block = kBlockTokens;  // snapshot only: tokens per block
  std::vector<std::uint64_t> stored, evicted;
  AgentLoad load;
  // The agent's last event before its stream closes: it is draining (stopping), takes no new
  // requests, and the gateways move the streams they carry there to other agents.
  bool draining = false;
};

std::string encode_kv_event(const KvEvent& e);
Status decode_kv_event(std::string_view json_text, KvEvent* out);  // kInvalidJson / kBadRequest

class BlockJournal final : public BlockObserver {
 public:
  void blocks_changed(std::span<const std::uint64_t> stored, std::span<const std::uint64_t> evicted) override;

  struct Delta {
    std::vector<std::uint64_t> stored, evicted;
    bool empty() const { return stored.empty() && evicted.empty(); }
  };
  // What changed since the last take, against what was published; it is published from now on.
  Delta take();
  std::vector<std::uint64_t> published() const;  // everything the stream has said is held

 private:
  mutable std::mutex mu_;
  std::unordered_set<std::uint64_t> held_;       // what the index holds now
  std::unordered_set<std::uint64_t> dirty_;      // changed since the last take
  std::unordered_set<std::uint64_t> published_;  // held, as of the last take
};

}  // namespace uma::cluster
