// SeqIdPool: the free sequence ids of one kind, the single owner of who may take which id.
//
// The scheduler has one (KvLedger's), that sessions and kept prefixes draw on. An id is either
// free in its pool or held by whoever took it: take() hands out the lowest free id (live
// sequences stay dense, which keeps per-sequence KV streams in few ubatches), take_highest() the
// highest (where a kept prefix's stream moves out of the running ids' way) and give_back()
// returns one. Taking from an empty pool, giving back an id that is already free, or one that is
// not this pool's, is a bug in the caller and aborts (as Session::set_state does on an illegal transition).
// Thread-safety: none (the compute thread's).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace uma {

class SeqIdPool {
 public:
  // Ids [lo, hi) belong to this pool, all free.
  void add_range(std::int32_t lo, std::int32_t hi);

  bool empty() const { return free_.empty(); }
  std::size_t size() const { return free_.size(); }
  std::int32_t lowest() const;                          // !empty(), else aborts
  bool owns(std::int32_t id) const;                     // one of this pool's ids, free or taken
  std::int32_t take();                                  // the lowest free id; !empty(), else aborts
  bool is_free(std::int32_t id) const;                  // one of this pool's ids, free
  void take(std::int32_t id);                           // that free id; else aborts
  std::int32_t highest() const;                         // !empty(), else aborts
  std::int32_t take_highest();                          // the highest free id; !empty(), else aborts
  void give_back(std::int32_t id);                      // a taken id of this pool

 private:
  std::vector<std::int32_t> free_;  // descending: the lowest at the back
  std::vector<std::uint8_t> state_; // by id: 0 not ours, 1 free, 2 taken
};

}  // namespace uma
