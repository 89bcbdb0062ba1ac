// The shared connection pieces: SessionSlots (one admission for every front end) and TxQueue (the
// cap over everything a connection has not sent yet).
#include <gtest/gtest.h>

#include "net/connection_table.h"
#include "net/session_slots.h"
#include "net/tx_queue.h"

namespace uma {
namespace {

TEST(SessionSlots, OneLimitForAllFrontEndsWithAGaugeEach) {
  std::atomic<std::int64_t> unix_open{0}, http_open{0};
  SessionSlots slots(3, {&unix_open, &http_open});
  EXPECT_TRUE(slots.try_take(FrontEnd::kUnixSocket));
  EXPECT_TRUE(slots.try_take(FrontEnd::kHttp));
  EXPECT_TRUE(slots.try_take(FrontEnd::kHttp));
  EXPECT_FALSE(slots.try_take(FrontEnd::kUnixSocket)) << "the HTTP requests count against the same limit";
  EXPECT_FALSE(slots.try_take(FrontEnd::kHttp));
  EXPECT_EQ(slots.in_use(), 3);
  EXPECT_EQ(unix_open.load(), 1);
  EXPECT_EQ(http_open.load(), 2);
  slots.give_back(FrontEnd::kHttp);
  EXPECT_EQ(http_open.load(), 1);
  EXPECT_TRUE(slots.try_take(FrontEnd::kUnixSocket)) << "a slot given back by one front end serves another";
  EXPECT_EQ(unix_open.load(), 2);
  EXPECT_EQ(slots.in_use(FrontEnd::kUnixSocket), 2);
  slots.give_back(FrontEnd::kHttp);
  EXPECT_FALSE(slots.try_take(FrontEnd::kHttp, 2)) << "a request's choices take their slots all or none";
  EXPECT_EQ(slots.in_use(), 2);
  EXPECT_TRUE(slots.try_take(FrontEnd::kHttp, 1));
}

TEST(SessionSlotsDeathTest, GivingBackASlotNeverTakenAborts) {
  SessionSlots slots(2);
  ASSERT_TRUE(slots.try_take(FrontEnd::kHttp));
  EXPECT_DEATH(slots.give_back(FrontEnd::kUnixSocket), "no slot taken");
}

TEST(TxQueue, TheCapCountsTheWriteInFlightToo) {
  TxQueue tx(10);
  EXPECT_TRUE(tx.flushed());
  EXPECT_TRUE(tx.push("123456"));
  ASSERT_TRUE(tx.can_start());
  EXPECT_EQ(tx.begin_write(), "123456");
  EXPECT_FALSE(tx.can_start()) << "one write at a time";
  EXPECT_TRUE(tx.push("abcd"));      // 6 in flight + 4 queued = the cap
  EXPECT_FALSE(tx.push("x")) << "6 in flight + 4 queued + 1 is over the cap";
  EXPECT_EQ(tx.unsent(), 10u);
  tx.finish_write();
  EXPECT_FALSE(tx.flushed());
  ASSERT_TRUE(tx.can_start());
  EXPECT_EQ(tx.begin_write(), "abcd");
  EXPECT_TRUE(tx.push("efghij"));
  tx.finish_write();
  EXPECT_EQ(tx.begin_write(), "efghij");
  tx.finish_write();
  EXPECT_TRUE(tx.flushed());
  EXPECT_TRUE(tx.push("")) << "an empty push is a no-op, never a drop";
  EXPECT_FALSE(tx.can_start());
}

TEST(TxQueue, AWholeReplyOverTheCapIsTakenOntoNothingUnsentButNothingAfterIt) {
  TxQueue tx(4);
  EXPECT_TRUE(tx.push("0123456789")) << "one reply larger than the cap, nothing unsent before it";
  EXPECT_FALSE(tx.push("a")) << "a reader behind by more than the cap";
  EXPECT_EQ(tx.begin_write(), "0123456789");
  EXPECT_FALSE(tx.push("b")) << "the write in flight counts";
  tx.finish_write();
  EXPECT_TRUE(tx.push("0123456789"));
}

struct FakeConn {
  std::uint64_t id() const { return conn_id; }
  std::uint64_t conn_id = 0;
  std::uint64_t request = 0;
  std::int32_t choices = 0;
};

TEST(ConnectionTable, ConnectionsAndRequests) {
  ConnectionTable<FakeConn> table;
  auto a = std::make_shared<FakeConn>(), b = std::make_shared<FakeConn>();
  a->conn_id = table.next_conn_id();
  b->conn_id = table.next_conn_id();
  EXPECT_NE(a->id(), b->id());
  table.add(a);
  table.add(b);
  const std::uint64_t r1 = table.bind(a), r2 = table.bind(b);
  EXPECT_EQ(r1, 1u) << "request ids start at 1";
  EXPECT_EQ(r2, 2u);
  EXPECT_EQ(a->request, r1);
  EXPECT_EQ(table.find(r2), b);
  // A closed connection stays findable by its request until unbound (its last event is routed).
  table.remove(b);
  EXPECT_EQ(table.find(r2), b);
  table.unbind(b);
  EXPECT_EQ(table.find(r2), nullptr);
  EXPECT_EQ(b->request, 0u);
  const auto all = table.snapshot();
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0], a);
  table.remove(a);
  EXPECT_TRUE(table.empty());
  EXPECT_EQ(table.find(r1), a) << "unbinding is the owner's call, not the table's";
  table.unbind(a);
  // A request of three choices: three consecutive ids, all routed to its connection, all unbound together.
  const std::uint64_t r3 = table.bind(a, 3);
  EXPECT_EQ(r3, 3u);
  for (std::uint64_t id : {r3, r3 + 1, r3 + 2}) EXPECT_EQ(table.find(id), a) << id;
  EXPECT_EQ(table.bind(b), 6u) << "the next request's id follows the choices'";
  table.unbind(a);
  for (std::uint64_t id : {r3, r3 + 1, r3 + 2}) EXPECT_EQ(table.find(id), nullptr) << id;
}

}  // namespace
}  // namespace uma
