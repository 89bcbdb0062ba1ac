#include "cluster/kv_events.h"
#include "sched/prefix_index.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

namespace uma::cluster {
namespace {

std::vector<Token> tokens(std::int32_t n, Token first = 0) {
  std::vector<Token> t(static_cast<std::size_t>(n));
  std::iota(t.begin(), t.end(), first);
  return t;
}

std::vector<std::uint64_t> sorted(std::vector<std::uint64_t> v) {
  std::sort(v.begin(), v.end());
  return v;
}

TEST(KvEvents, TheIndexReportsABlockWhenItsFirstHolderComesAndWhenItsLastGoes) {
  BlockJournal journal;
  PrefixIndex index(4);
  index.set_observer(&journal);
  const std::vector<Token> a = tokens(10);  // 2 whole blocks (the last 2 tokens are no block)
  std::vector<Token> b = tokens(12);        // 3 blocks, the first 2 shared with a
  index.insert(1, a);
  index.insert(2, b);
  const std::vector<std::uint64_t> hb = chained_block_hashes(b, 4);
  ASSERT_EQ(hb.size(), 3u);
  BlockJournal::Delta d = journal.take();
  EXPECT_EQ(sorted(d.stored), sorted(hb));
  EXPECT_TRUE(d.evicted.empty());

  index.erase(2);  // a still holds the first two
  d = journal.take();
  EXPECT_TRUE(d.stored.empty());
  EXPECT_EQ(d.evicted, std::vector<std::uint64_t>{hb[2]});
  index.erase(1);
  d = journal.take();
  EXPECT_EQ(sorted(d.evicted), sorted({hb[0], hb[1]}));
  EXPECT_TRUE(journal.published().empty());
}

TEST(KvEvents, ChangesBetweenTwoTakesAreCoalesced) {
  BlockJournal journal;
  PrefixIndex index(4);
  index.set_observer(&journal);
  const std::vector<Token> a = tokens(8);
  index.insert(1, a);
  index.erase(1);  // stored and evicted within one window: never said
  EXPECT_TRUE(journal.take().empty());

  index.insert(1, a);
  EXPECT_EQ(journal.take().stored.size(), 2u);
  index.erase(1);
  index.insert(2, a);  // evicted and stored again: still held, nothing to say
  EXPECT_TRUE(journal.take().empty());
  EXPECT_EQ(journal.published(), sorted(chained_block_hashes(a, 4)));
}

TEST(KvEvents, ReplacingAnEntryReportsOnlyWhatChanged) {
  BlockJournal journal;
  PrefixIndex index(4);
  index.set_observer(&journal);
  std::vector<Token> t = tokens(8);
  index.insert(1, t);
  journal.take();
  t.resize(12, 99);  // the same entry grows by a block (a session's prompt then its output)
  index.insert(1, t);
  const BlockJournal::Delta d = journal.take();
  EXPECT_EQ(d.stored, std::vector<std::uint64_t>{chained_block_hashes(t, 4)[2]});
  EXPECT_TRUE(d.evicted.empty());
}

TEST(KvEvents, EventsRoundTripAndBadOnesAreTypedErrors) {
  KvEvent snap;
  snap.snapshot = true;
  snap.boot_id = "b007";
  snap.block = 32;
  snap.stored = {0, 1, 0xffffffffffffffffull, 0x0123456789abcdefull};
  snap.load = {3, 1, 4096, 17};
  KvEvent back;
  ASSERT_TRUE(decode_kv_event(encode_kv_event(snap), &back).ok());
  EXPECT_TRUE(back.snapshot);
  EXPECT_EQ(back.boot_id, "b007");
  EXPECT_EQ(back.stored, snap.stored);
  EXPECT_EQ(back.load, snap.load);

  KvEvent delta;
  delta.stored = {7};
  delta.evicted = {9, 10};
  ASSERT_TRUE(decode_kv_event(encode_kv_event(delta), &back).ok());
  EXPECT_FALSE(back.snapshot);
  EXPECT_EQ(back.evicted, delta.evicted);
  EXPECT_FALSE(back.draining);
  delta.draining = true;
  ASSERT_TRUE(decode_kv_event(encode_kv_event(delta), &back).ok());
  EXPECT_TRUE(back.draining);

  EXPECT_EQ(decode_kv_event("[1]", &back).code(), ErrorCode::kInvalidJson);
  EXPECT_EQ(decode_kv_event(R"({"type":"nope"})", &back).param(), "type");
  EXPECT_EQ(decode_kv_event(R"({"type":"delta","stored":["xyz"]})", &back).param(), "stored");
  EXPECT_EQ(decode_kv_event(R"({"type":"delta","stored":[12]})", &back).param(), "stored");
  EXPECT_EQ(decode_kv_event(R"({"type":"delta","evicted":["1"],"load":{"active":"x"}})", &back).param(), "active");
  EXPECT_EQ(decode_kv_event(R"({"type":"delta","load":{"admitted":1.5}})", &back).param(), "admitted");
  EXPECT_EQ(decode_kv_event(R"({"type":"snapshot","boot_id":"x","block":0})", &back).param(), "block");
  EXPECT_EQ(decode_kv_event(R"({"type":"snapshot"})", &back).param(), "boot_id");
  EXPECT_EQ(decode_kv_event(R"({"type":"delta","draining":1})", &back).param(), "draining");
}

}  // namespace
}  // namespace uma::cluster
