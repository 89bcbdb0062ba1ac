#include "sched/kv_ledger.h"

namespace uma {

KvLedger::KvLedger(const KvShape& shape) : shape_(shape) { ids_.add_range(0, shape.n_seq_max); }

std::int32_t KvLedger::cells_free(std::int32_t granted) const {
  return shape_.per_seq ? shape_.n_ctx_seq : shape_.n_ctx - granted;
}

std::int32_t KvLedger::watermark(bool anyone_running) const {
  if (!shape_.preemption || !anyone_running) return 0;
  return static_cast<std::int32_t>(shape_.watermark_share * shape_.n_ctx);
}

std::int32_t KvLedger::shortfall(std::int32_t need, std::int32_t granted, bool anyone_running) const {
  return shape_.per_seq ? 0 : need + watermark(anyone_running) - cells_free(granted);
}

bool KvLedger::fits(std::int32_t need, std::int32_t granted, bool anyone_running) const {
  return !ids_.empty() && shortfall(need, granted, anyone_running) <= 0;
}

}  // namespace uma
