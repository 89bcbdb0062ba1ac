// KvLedger: the one owner of the KV cache's two resources, sequence ids and cells, and of the one
// room test. Nobody else holds a free id or writes the "is there room" arithmetic.
// - Ids: one SeqIdPool, [0, n_seq_max), that sessions and kept prefixes both draw on. A kept
//   prefix holds the id its session ran under (per-sequence KV: the stream stays where it is, and
//   the next request with that prefix takes it over) until a start needs the id. Every take and
//   give back goes through it; a double give-back or a foreign id aborts (seq_id_pool.h).
// - Cells: held by the claims of sessions holding a sequence and by kept prefixes. Claims change
//   with every token and with who shares whose prefix, so the scheduler hands the ledger the
//   current total (`granted`) when it asks, rather than the ledger keeping a copy that goes stale.
//   Per-sequence KV: every id owns n_ctx_seq cells of its own, so a free id is all a start needs.
// - The watermark: a share of n_ctx kept free for running sessions to grow into when starting or
//   resuming another, none when nobody runs (a request as large as the context can still start),
//   none without preemption (worst cases are granted up front).
// Thread-safety: none (the compute thread's). Pure arithmetic over what it is told: unit-tested in
// kv_ledger_test.cc.
#pragma once

#include <cstdint>

#include "sched/seq_id_pool.h"

namespace uma {

struct KvShape {
  std::int32_t n_ctx = 0;       // cells in all
  std::int32_t n_ctx_seq = 0;   // cells one sequence may use
  std::int32_t n_seq_max = 1;   // sequence ids
  bool per_seq = false;         // per-sequence KV streams (else one unified cache)
  double watermark_share = 0.0; // of n_ctx
  bool preemption = true;
};

class KvLedger {
 public:
  explicit KvLedger(const KvShape& shape);
  KvLedger(const KvLedger&) = delete;
  KvLedger& operator=(const KvLedger&) = delete;

  bool per_seq() const { return shape_.per_seq; }
  std::int32_t n_ctx() const { return shape_.n_ctx; }
  SeqIdPool& ids() { return ids_; }
  const SeqIdPool& ids() const { return ids_; }

  // Cells nobody holds, given the cells `granted` to claims and kept prefixes (per-sequence KV:
  // one id's worth, whatever the others hold).
  std::int32_t cells_free(std::int32_t granted) const;
  std::int32_t watermark(bool anyone_running) const;
  // Cells short of granting `need` more with the watermark kept (<= 0: none short).
  std::int32_t shortfall(std::int32_t need, std::int32_t granted, bool anyone_running) const;
  // The one room test: a free session id and no shortfall.
  bool fits(std::int32_t need, std::int32_t granted, bool anyone_running) const;

 private:
  KvShape shape_;
  SeqIdPool ids_;
};

}  // namespace uma
