// AgentDirectory's own bookkeeping, fed synthetic stream events (no agent, no socket): what this
// gateway counts as pending on an agent until the agent's load report covers it.
#include "gateway/agent_directory.h"

#include <gtest/gtest.h>

namespace uma::gateway {
namespace {

cluster::KvEvent load_event(bool snapshot, std::int64_t active, std::int64_t backlog, std::int64_t admitted) {
  cluster::KvEvent e;
  e.snapshot = snapshot;
  e.boot_id = "b1";
  e.load = {active, 0, backlog, admitted};
  return e;
}

struct DirectoryTest : ::testing::Test {
  DirectoryTest() : dir(io, DirectoryOptions{}, nullptr) {
    cluster::AgentState s;
    s.id = "a1";
    s.address = "http://127.0.0.1:1";
    s.boot_id = "b1";  // no event stream address: the test is its stream
    s.models = {{"m.gguf", 1, cluster::ModelState::kLoaded, store::Tier::kDram}};
    s.max_sessions = 4;
    dir.update({s}, SteadyClock::now());
    link = dir.find("a1");
  }
  // The link's stream live, last heard now, and checked then; the time it was.
  SteadyClock::time_point live_and_checked() {
    const auto t0 = SteadyClock::now();
    link->heard(t0);
    link->apply(load_event(true, 0, 0, 0));
    dir.check_streams(t0);
    return t0;
  }
  // Checks every `step` after `t` while the link is live (at most `n` times); the last check's time.
  SteadyClock::time_point check_while_live(SteadyClock::time_point t, SteadyClock::duration step, int n = 1000) {
    while (link->live() && n-- > 0) dir.check_streams(t += step);
    return t;
  }
  const DirectoryOptions o;
  boost::asio::io_context io;
  AgentDirectory dir;
  AgentLink* link = nullptr;
};

// A report that arrives after a dispatch but was measured before the agent admitted it (its gauges
// lag by up to a tick) must not make the dispatch's prompt vanish from what is ahead there.
TEST_F(DirectoryTest, ADispatchStaysPendingUntilAReportCoversIt) {
  ASSERT_NE(link, nullptr);
  link->apply(load_event(true, 0, 0, 5));  // live, 5 requests admitted so far
  ASSERT_TRUE(link->live());
  const auto now = SteadyClock::now();
  dir.dispatched(*link, 1, 1000, {}, now);
  dir.dispatched(*link, 2, 300, {}, now);
  EXPECT_EQ(link->pending_tokens(), 1300);
  EXPECT_EQ(link->sessions_in_use(), 2);
  link->apply(load_event(false, 1, 0, 5));  // a report measured before either was admitted
  EXPECT_EQ(link->pending_tokens(), 1300) << "a report received after the dispatch does not yet cover it";
  EXPECT_EQ(link->sessions_in_use(), 3);
  link->apply(load_event(false, 2, 1000, 6));  // covers the first
  EXPECT_EQ(link->pending_tokens(), 300);
  EXPECT_EQ(link->sessions_in_use(), 3);
  link->apply(load_event(false, 3, 1300, 7));  // and the second
  EXPECT_EQ(link->pending_tokens(), 0);
  EXPECT_EQ(link->sessions_in_use(), 3);
  dir.dispatched(*link, 3, 50, {}, now);  // the next one counts from the latest report
  EXPECT_EQ(link->pending_tokens(), 50);
  link->apply(load_event(false, 4, 1350, 8));
  EXPECT_EQ(link->pending_tokens(), 0);
}

TEST_F(DirectoryTest, BlocksOfAnotherSizeAreNotCountedAsCachedTokens) {
  ASSERT_NE(link, nullptr);
  const std::vector<Token> prompt(100, 7);
  const auto blocks = chained_block_hashes(prompt, kBlockTokens);
  ASSERT_EQ(blocks.size(), 3u);
  for (std::int32_t size : {kBlockTokens, 2 * kBlockTokens}) {
    cluster::KvEvent e = load_event(true, 1, 0, 0);
    e.block = size;
    e.stored = blocks;  // what it says it holds
    link->apply(e);
    EXPECT_TRUE(link->live());
    EXPECT_EQ(link->cached_tokens(blocks), size == kBlockTokens ? 3 * kBlockTokens : 0) << size;
    cluster::KvEvent more = load_event(false, 2, 0, 0);
    more.stored = blocks;  // a delta of the same stream
    link->apply(more);
    EXPECT_EQ(link->cached_tokens(blocks), size == kBlockTokens ? 3 * kBlockTokens : 0) << size;
    EXPECT_EQ(link->state().active_sessions, 2) << "its load counts either way";
  }
}

TEST_F(DirectoryTest, AFirstByteOrAnEndStopsTheCountWhateverTheReports) {
  ASSERT_NE(link, nullptr);
  link->apply(load_event(true, 0, 0, 0));
  const auto now = SteadyClock::now();
  dir.dispatched(*link, 1, 1000, {}, now);
  dir.first_byte(*link, 1);
  EXPECT_EQ(link->pending_tokens(), 0) << "its prompt is computed";
  EXPECT_EQ(link->sessions_in_use(), 1) << "but it still holds a session";
  dir.ended(*link, 1);
  EXPECT_EQ(link->sessions_in_use(), 0);
}

// A hung agent keeps its socket open and says nothing: out of routing once its stream has been
// silent for `silent` while this gateway listened (checks every 100 ms), not before.
TEST_F(DirectoryTest, AStreamSilentForTheWholeWindowIsTakenOutOfRouting) {
  ASSERT_NE(link, nullptr);
  const auto t0 = live_and_checked();
  ASSERT_TRUE(link->live());
  const auto out = check_while_live(t0, o.check_every);
  EXPECT_FALSE(link->live());
  EXPECT_EQ(dir.live(), 0u);
  EXPECT_EQ(out - t0, o.silent + o.check_every) << "out at the first check past the window, not before";
}

// When the gateway's own I/O thread was away (checks 8 s apart), the agents' pings may be unread
// in the socket: that gap counts as loop_stall (500 ms) of silence, not 8 s.
TEST_F(DirectoryTest, AGapInTheGatewaysListeningCountsOnlyAsLoopStall) {
  ASSERT_NE(link, nullptr);
  const auto t0 = live_and_checked();
  const auto back = t0 + std::chrono::seconds(8);  // the loop was busy elsewhere
  dir.check_streams(back);
  EXPECT_TRUE(link->live()) << "the gateway was not listening";
  // Listening again: the stream has what is left of its window, and a ping within it keeps it.
  const auto left = o.silent - o.loop_stall;
  const int checks = static_cast<int>(left / o.check_every);
  check_while_live(back, o.check_every, checks);
  ASSERT_TRUE(link->live());
  const auto ping = back + left + std::chrono::milliseconds(50);  // between two checks
  link->heard(ping);
  // Truly silent from then on while the gateway listens: out one window after the ping.
  const auto out = check_while_live(back + left, o.check_every);
  EXPECT_FALSE(link->live());
  EXPECT_GT(out - ping, o.silent);
  EXPECT_LE(out - ping, o.silent + 2 * o.check_every);
}

// Checks late but within loop_stall (a busy loop, 250 ms apart) count in full: a hung agent is out
// after the same 2 s.
TEST_F(DirectoryTest, LateChecksStillCountInFull) {
  ASSERT_NE(link, nullptr);
  const auto t0 = live_and_checked();
  const auto out = check_while_live(t0, std::chrono::milliseconds(250));
  EXPECT_FALSE(link->live());
  EXPECT_EQ(out - t0, o.silent + std::chrono::milliseconds(250));
}

// A loop stalled again and again (every check 1 s late) still finds a hung agent: each stall counts
// as loop_stall, so it is out after silent / loop_stall of them, not never.
TEST_F(DirectoryTest, RepeatedStallsDoNotHideAHungAgent) {
  ASSERT_NE(link, nullptr);
  const auto t0 = live_and_checked();
  const auto out = check_while_live(t0, std::chrono::seconds(1), 100);
  EXPECT_FALSE(link->live());
  EXPECT_EQ(out - t0, std::chrono::seconds(o.silent / o.loop_stall + 1));
}

// An agent that says it is draining leaves routing at once (before its stream ends or its key
// goes), the gateway is told once, and when it leaves the view it is not counted as hung.
TEST_F(DirectoryTest, ADrainingAgentLeavesRoutingAtOnceAndLeavesTheViewAsNotHung) {
  ASSERT_NE(link, nullptr);
  std::vector<std::string> draining;
  std::vector<std::pair<std::string, bool>> gone;
  AgentDirectory d(io, DirectoryOptions{}, [&](const std::string& id, bool hung) { gone.emplace_back(id, hung); });
  d.set_on_draining([&](const std::string& id) { draining.push_back(id); });
  cluster::AgentState s;
  s.id = "a2";
  s.address = "http://127.0.0.1:1";
  s.boot_id = "b1";
  s.models = {{"m.gguf", 1, cluster::ModelState::kLoaded, store::Tier::kDram}};
  s.max_sessions = 4;
  d.update({s}, SteadyClock::now());
  AgentLink* a = d.find("a2");
  ASSERT_NE(a, nullptr);
  a->apply(load_event(true, 1, 0, 1));
  AgentDirectory::Candidates cs;
  d.candidates("m.gguf", {}, {}, SteadyClock::now(), &cs);
  ASSERT_EQ(cs.list.size(), 1u);
  EXPECT_EQ(d.serving("m.gguf", ""), 1u);
  cluster::KvEvent last = load_event(false, 1, 0, 1);
  last.draining = true;
  a->apply(last);
  a->apply(last);  // said twice: told once
  EXPECT_TRUE(a->draining());
  EXPECT_FALSE(a->live());
  EXPECT_EQ(draining, std::vector<std::string>{"a2"});
  d.candidates("m.gguf", {}, {}, SteadyClock::now(), &cs);
  EXPECT_TRUE(cs.list.empty());
  EXPECT_EQ(d.serving("m.gguf", ""), 0u) << "no stream can move there";
  d.update({}, SteadyClock::now());  // its key is gone: it stopped
  ASSERT_EQ(gone.size(), 1u);
  EXPECT_EQ(gone[0], std::make_pair(std::string("a2"), false));
}

}  // namespace
}  // namespace uma::gateway
