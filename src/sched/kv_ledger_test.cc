// KvLedger: the ids' split and the one room test, on synthetic shapes.
#include "sched/kv_ledger.h"

#include <gtest/gtest.h>

namespace uma {
namespace {

KvShape unified(std::int32_t n_ctx, std::int32_t n_seq_max) {
  KvShape k;
  k.n_ctx = n_ctx;
  k.n_ctx_seq = n_ctx;
  k.n_seq_max = n_seq_max;
  k.watermark_share = 0.1;
  return k;
}

TEST(KvLedger, UnifiedRoomCountsGrantedCellsAndTheWatermarkOnlyWhileSomeoneRuns) {
  KvLedger ledger(unified(1000, 4));
  EXPECT_EQ(ledger.cells_free(300), 700);
  EXPECT_TRUE(ledger.fits(1000, 0, false)) << "nobody runs: a request as large as the context starts";
  EXPECT_FALSE(ledger.fits(1000, 0, true)) << "someone runs: the watermark (100 cells) is kept";
  EXPECT_EQ(ledger.shortfall(650, 300, true), 650 + 100 - 700);
  EXPECT_TRUE(ledger.fits(600, 300, true));
  EXPECT_FALSE(ledger.fits(601, 300, true));
  for (int i = 0; i < 4; ++i) ledger.ids().take();
  EXPECT_FALSE(ledger.fits(0, 0, false)) << "no sequence id left: no room whatever the cells";
}

TEST(KvLedger, WithoutPreemptionThereIsNoWatermark) {
  KvShape k = unified(1000, 2);
  k.preemption = false;
  KvLedger ledger(k);
  EXPECT_EQ(ledger.watermark(true), 0);
  EXPECT_TRUE(ledger.fits(700, 300, true));
}

TEST(KvLedger, PerSequenceIdsOwnTheirCells) {
  KvShape k = unified(4096, 8);
  k.per_seq = true;
  k.n_ctx_seq = 512;
  KvLedger ledger(k);
  EXPECT_EQ(ledger.cells_free(100000), 512) << "per-sequence: one id's cells, whatever others hold";
  EXPECT_EQ(ledger.ids().size(), 8u) << "one pool: sessions and kept prefixes draw on the same ids";
  EXPECT_TRUE(ledger.fits(100000, 100000, true)) << "a free id is all a start needs";
  for (int i = 0; i < 8; ++i) ledger.ids().take();
  EXPECT_FALSE(ledger.fits(0, 0, false));
}

}  // namespace
}  // namespace uma
