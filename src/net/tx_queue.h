// TxQueue: what one connection still has to send, in two buffers: the bytes queued (pending) and
// the bytes handed to the one async_write in flight. The cap counts both, so a connection never
// holds more than the cap however its writes interleave (a cap over the pending bytes alone lets
// a slow reader hold twice of it). Front ends drop a connection whose push() fails. One push onto
// nothing unsent is taken whatever its size: a whole reply (a large batch of embeddings) is
// already held by then, and what a request may ask for bounds it; the cap is on a reader who
// falls behind.
//
// Thread-safety: none (one connection, one I/O thread). The in-flight buffer stays valid and
// unchanged from begin_write() until finish_write().
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace uma {

class TxQueue {
 public:
  explicit TxQueue(std::size_t cap) : cap_(cap) {}

  // Queues `bytes`; false, queuing nothing, when something is unsent and everything unsent would
  // then exceed the cap.
  bool push(std::string_view bytes) {
    if (unsent() > 0 && unsent() + bytes.size() > cap_) return false;
    pending_.append(bytes);
    return true;
  }
  std::size_t unsent() const { return pending_.size() + inflight_.size(); }
  bool writing() const { return writing_; }
  bool can_start() const { return !writing_ && !pending_.empty(); }
  bool flushed() const { return !writing_ && pending_.empty(); }  // nothing queued or in flight
  // The pending bytes become the write in flight; call only when can_start().
  std::string_view begin_write() {
    inflight_.swap(pending_);
    pending_.clear();
    writing_ = true;
    return inflight_;
  }
  void finish_write() {
    writing_ = false;
    inflight_.clear();
  }

 private:
  std::size_t cap_;
  std::string pending_, inflight_;
  bool writing_ = false;
};

}  // namespace uma
