// EmbedQueue: embeddings requests waiting for the compute thread, run between decode ticks in
// passes bounded by a token budget, so an embeddings burst delays the decode streams by at most
// one bounded pass a tick (the scheduler gives the budget its latency guard allows). A request's
// inputs may span several passes; its one kDone event carries every vector, in input order.
//
// Thread-safety: none; owned by the Scheduler on the compute thread.
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "runtime/decoder.h"
#include "serve/request.h"

namespace uma {

class EmbedQueue {
 public:
  // Checks the inputs (1..decoder.embed_max_tokens() tokens each) and queues them; an error event
  // otherwise.
  void add(const Decoder& decoder, Request request, std::vector<Event>& out);
  bool empty() const { return jobs_.empty(); }
  // One pass: the oldest request's next inputs, and later requests' while `budget_tokens` allows
  // (at least one input). Finished requests get their kDone event.
  void run(Decoder& decoder, std::int64_t budget_tokens, std::vector<Event>& out);
  bool cancel(RequestId id, std::vector<Event>& out);  // false: not queued here
  void fail_all(const Status& why, std::vector<Event>& out);
  std::uint64_t tokens_total() const { return tokens_total_; }

 private:
  struct Job {
    RequestId id = 0;
    Clock::time_point received_at{};
    std::vector<std::vector<Token>> inputs;
    std::vector<std::vector<float>> vectors;  // of inputs[0 .. vectors.size())
    std::int32_t tokens = 0;
  };
  std::deque<Job> jobs_;
  std::uint64_t tokens_total_ = 0;
};

}  // namespace uma
