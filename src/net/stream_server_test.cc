// The shared serving layer (Connection + StreamServer) with a line-based fake adapter, over real
// Unix socket pairs, the I/O loop polled on the test's thread until each condition holds.
#include "net/stream_server.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/local/connect_pair.hpp>
#include <boost/asio/local/stream_protocol.hpp>

#include <algorithm>
#include <stdexcept>
#include <utility>

namespace uma {
namespace {

using namespace std::chrono_literals;

// "go\n" starts a request, "boom\n" throws, "prep:<text>\n" defers its parse (the deferred work
// makes <text> the prompt); events are encoded as "tok:<text>" and "end".
class LineAdapter final : public ProtocolAdapter {
 public:
  void feed(std::string_view b) override { in_.append(b); }
  std::size_t buffered() const override { return in_.size(); }
  std::size_t max_buffered() const override { return 1024; }
  std::optional<Input> next(bool busy) override {
    if (deferred_) {
      EXPECT_TRUE(deferred_->done) << "next() before the deferred work ran";
      Request r;
      r.prompt = deferred_->prompt;
      deferred_.reset();
      return Start{std::move(r), 1, {}};
    }
    const auto nl = in_.find('\n');
    if (busy || nl == std::string::npos) return std::nullopt;
    const std::string line = in_.substr(0, nl);
    in_.erase(0, nl + 1);
    if (line == "boom") throw std::runtime_error("adapter bug");
    if (line.rfind("prep:", 0) == 0) {
      auto d = std::make_shared<Deferred>();
      deferred_ = d;
      return Defer{[d, text = line.substr(5)] {
        d->prompt = text;
        d->done = true;
      }};
    }
    Request r;
    r.prompt = line;
    if (line == "go3") {  // three choices, seeded
      r.sampling.seed = 7;
      return Start{std::move(r), 3, {}};
    }
    return Start{std::move(r), 1, {}};
  }
  void started(RequestId, std::string& out) override { out += "started\n"; }
  Answer refused(const Status&) override { return Answer{"refused\n", ErrorCode::kTooManySessions, false}; }
  void encode(const Event& ev, std::string& out) override {
    out += ev.kind == Event::Kind::kToken ? "tok:" + ev.text + "\n" : "end\n";
  }
  bool keep_alive() const override { return true; }
  std::string internal_error() override { return "internal\n"; }

 private:
  struct Deferred {
    std::string prompt;
    bool done = false;
  };
  std::string in_;
  std::shared_ptr<Deferred> deferred_;
};

class Fixture {
 public:
  // offload: deferred work waits in `jobs` for the test to run it (run_jobs()); else it runs inline.
  // line: requests past the slots wait (SlotQueue); none by default, so a full server refuses.
  explicit Fixture(std::int32_t max_sessions, bool offload = false, SlotQueue line = {0, 30s}) : slots(max_sessions) {
    StreamServer::Offload off;
    if (offload) off = [this](std::function<void()> job) {
      jobs.push_back(std::move(job));
      return true;
    };
    server = std::make_unique<StreamServer>(io, metrics, slots, [this](WorkItem w) { work.push_back(std::move(w)); },
                                            std::move(off));
    FrontEndConfig cfg;
    cfg.eof_closes = true;
    cfg.connections_open = &metrics.connections_open;
    server->add_front_end(cfg, [] { return std::make_unique<LineAdapter>(); });
    server->set_slot_queue(line);
  }
  // A connected client: its end of a socket pair, the other end adopted by the server.
  int connect() {
    boost::asio::local::stream_protocol::socket ours(io), theirs(io);
    boost::asio::local::connect_pair(ours, theirs);
    server->adopt(FrontEnd::kUnixSocket, std::move(theirs));
    return ours.release();
  }
  template <typename Pred>
  bool poll_until(Pred pred) {
    for (auto end = std::chrono::steady_clock::now() + 5s; std::chrono::steady_clock::now() < end;) {
      io.poll();
      io.restart();
      if (pred()) return true;
    }
    return false;
  }
  // Reads from `fd` until `want` has arrived (or the peer closed, or 5 s passed).
  std::string read_until(int fd, std::string_view want) {
    std::string got;
    poll_until([&] {
      char buf[256];
      const ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
      if (n > 0) got.append(buf, static_cast<std::size_t>(n));
      return n == 0 || got.find(want) != std::string::npos;
    });
    return got;
  }
  RequestId last_started() const {
    for (auto it = work.rbegin(); it != work.rend(); ++it) {
      if (const auto* r = std::get_if<Request>(&*it)) return r->id;
    }
    return 0;
  }
  void end(RequestId id) {
    Event ev;
    ev.request_id = id;
    ev.kind = Event::Kind::kDone;
    server->deliver({ev});
  }

  void run_jobs() {
    for (auto& job : std::exchange(jobs, {})) job();
  }
  std::size_t requests() const {
    return static_cast<std::size_t>(std::count_if(work.begin(), work.end(), [](const WorkItem& w) { return std::holds_alternative<Request>(w); }));
  }

  boost::asio::io_context io;
  ServerMetrics metrics;
  SessionSlots slots;
  std::vector<WorkItem> work;
  std::vector<std::function<void()>> jobs;
  std::unique_ptr<StreamServer> server;
};

void send_text(int fd, std::string_view s) { ASSERT_EQ(::send(fd, s.data(), s.size(), MSG_NOSIGNAL), static_cast<ssize_t>(s.size())); }

TEST(StreamServer, ASlotBelongsToARequestAndOutlivesAClientThatLeft) {
  Fixture f(1);
  const int a = f.connect(), b = f.connect();
  send_text(a, "go\n");
  EXPECT_EQ(f.read_until(a, "started\n"), "started\n");
  const RequestId first = f.last_started();
  ASSERT_NE(first, 0u);
  send_text(b, "go\n");
  EXPECT_EQ(f.read_until(b, "refused\n"), "refused\n") << "one slot, taken by a's request";

  ::close(a);  // a leaves mid-request: its request is cancelled, its slot kept until the last event
  ASSERT_TRUE(f.poll_until([&] {
    return !f.work.empty() && std::holds_alternative<CancelRequest>(f.work.back());
  }));
  EXPECT_EQ(std::get<CancelRequest>(f.work.back()).id, first);
  EXPECT_EQ(f.slots.in_use(), 1);
  EXPECT_EQ(f.metrics.disconnects_mid_stream_total.load(), 1u);
  send_text(b, "go\n");
  EXPECT_EQ(f.read_until(b, "refused\n"), "refused\n") << "the cancelled request still runs";

  f.end(first);  // the scheduler ends it: the slot is free, and b's next request runs
  ASSERT_TRUE(f.poll_until([&] { return f.slots.in_use() == 0; }));
  send_text(b, "go\n");
  EXPECT_EQ(f.read_until(b, "started\n"), "started\n");
  EXPECT_NE(f.last_started(), first);
  EXPECT_EQ(f.slots.in_use(), 1);
  ::close(b);
}

TEST(StreamServer, RequestsPastTheSlotsWaitInLineAndStartInTurn) {
  Fixture f(1, false, {2, 30s});
  const int a = f.connect(), b = f.connect(), c = f.connect(), d = f.connect();
  send_text(a, "go\n");
  EXPECT_EQ(f.read_until(a, "started\n"), "started\n");
  const RequestId first = f.last_started();
  send_text(b, "go\n");
  ASSERT_TRUE(f.poll_until([&] { return f.metrics.sessions_waiting.load() == 1; }));
  send_text(c, "go\n");
  ASSERT_TRUE(f.poll_until([&] { return f.metrics.sessions_waiting.load() == 2; }));
  send_text(d, "go\n");
  EXPECT_EQ(f.read_until(d, "refused\n"), "refused\n") << "the line holds two";
  EXPECT_EQ(f.metrics.rejected(RejectReason::kSessionCap), 1u);
  EXPECT_EQ(f.requests(), 1u) << "nobody in line has reached the scheduler";

  ::close(c);  // c leaves while in line: it takes nothing, and b keeps its place
  ASSERT_TRUE(f.poll_until([&] { return f.metrics.sessions_waiting.load() == 1; }));
  send_text(d, "go\n");  // d comes again: behind b, not before
  ASSERT_TRUE(f.poll_until([&] { return f.metrics.sessions_waiting.load() == 2; }));

  f.end(first);  // a's request ends: its slot goes to b, the oldest in line
  EXPECT_EQ(f.read_until(b, "started\n"), "started\n");
  EXPECT_EQ(f.requests(), 2u);
  EXPECT_EQ(f.slots.in_use(), 1);
  EXPECT_EQ(f.metrics.sessions_waiting.load(), 1);
  const RequestId second = f.last_started();
  f.end(second);
  EXPECT_EQ(f.read_until(d, "started\n"), "started\n");
  EXPECT_EQ(f.requests(), 3u);
  EXPECT_EQ(f.metrics.sessions_waiting.load(), 0);
  for (int fd : {a, b, d}) ::close(fd);
}

TEST(StreamServer, ARequestWaitingPastItsDeadlineIsRefused) {
  Fixture f(1, false, {4, 0ms});
  f.server->start();  // the sweep that expires the line
  const int a = f.connect(), b = f.connect();
  send_text(a, "go\n");
  EXPECT_EQ(f.read_until(a, "started\n"), "started\n");
  send_text(b, "go\n");
  EXPECT_EQ(f.read_until(b, "refused\n"), "refused\n");
  EXPECT_EQ(f.metrics.rejected(RejectReason::kQueueTimeout), 1u);
  EXPECT_EQ(f.metrics.sessions_waiting.load(), 0);
  EXPECT_EQ(f.requests(), 1u);
  EXPECT_EQ(f.slots.in_use(), 1);
  for (int fd : {a, b}) ::close(fd);
}

TEST(StreamServer, ARequestsChoicesRunAsConsecutiveRequestsAndEndTogether) {
  Fixture f(4);
  const int a = f.connect();
  send_text(a, "go3\n");
  EXPECT_EQ(f.read_until(a, "started\n"), "started\n");
  std::vector<std::pair<RequestId, std::uint32_t>> started;
  for (const WorkItem& w : f.work) {
    if (const auto* r = std::get_if<Request>(&w)) started.emplace_back(r->id, r->sampling.seed);
  }
  std::sort(started.begin(), started.end());
  ASSERT_EQ(started.size(), 3u);
  const RequestId first = started[0].first;
  EXPECT_EQ(started, (std::vector<std::pair<RequestId, std::uint32_t>>{{first, 7}, {first + 1, 8}, {first + 2, 9}}))
      << "consecutive ids; each choice its own seed";
  EXPECT_EQ(f.slots.in_use(), 3);

  ::close(a);  // the client leaves: every choice is cancelled; the slots stay until each one's end
  ASSERT_TRUE(f.poll_until([&] {
    return std::count_if(f.work.begin(), f.work.end(), [](const WorkItem& w) { return std::holds_alternative<CancelRequest>(w); }) == 3;
  }));
  f.end(first + 1);
  f.end(first);
  f.io.poll();  // runs the posted deliveries
  f.io.restart();
  EXPECT_EQ(f.slots.in_use(), 3) << "a choice still runs";
  f.end(first + 2);
  ASSERT_TRUE(f.poll_until([&] { return f.slots.in_use() == 0; }));
}

TEST(StreamServer, EventsReachTheirConnectionAndAKeptAliveOneServesTheNextRequest) {
  Fixture f(4);
  const int a = f.connect();
  send_text(a, "go\ngo\n");  // pipelined: the second waits for the first's end
  f.read_until(a, "started\n");
  const RequestId first = f.last_started();
  Event tok;
  tok.request_id = first;
  tok.kind = Event::Kind::kToken;
  tok.text = "hi";
  f.server->deliver({tok});
  f.end(first);
  const std::string got = f.read_until(a, "end\nstarted\n");
  EXPECT_EQ(got, "tok:hi\nend\nstarted\n");
  EXPECT_NE(f.last_started(), first);
  EXPECT_EQ(f.slots.in_use(), 1);
  ::close(a);
}

TEST(StreamServer, WhatAHandlerThrowsEndsThatConnectionOnly) {
  Fixture f(4);
  const int a = f.connect(), b = f.connect();
  send_text(a, "boom\n");
  EXPECT_EQ(f.read_until(a, "never"), "internal\n") << "the internal-error answer, then the close";
  EXPECT_EQ(f.metrics.errors(ErrorCode::kInternal), 1u);
  send_text(b, "go\n");
  EXPECT_EQ(f.read_until(b, "started\n"), "started\n");
  ::close(a);
  ::close(b);
}

TEST(StreamServer, DeferredInputIsServedOnceItsWorkHasRunAndInOrder) {
  Fixture f(4, true);
  const int a = f.connect();
  send_text(a, "prep:long\ngo\n");
  ASSERT_TRUE(f.poll_until([&] { return f.jobs.size() == 1; }));
  EXPECT_EQ(f.requests(), 0u) << "nothing of the connection is served while its input is prepared";
  EXPECT_EQ(f.metrics.inputs_prepared_off_io_total.load(), 1u);
  f.run_jobs();
  EXPECT_EQ(f.read_until(a, "started\n"), "started\n");
  ASSERT_EQ(f.requests(), 1u);
  EXPECT_EQ(std::get<Request>(f.work.back()).prompt, "long") << "the deferred work's result started";
  f.end(f.last_started());
  EXPECT_EQ(f.read_until(a, "end\nstarted\n"), "end\nstarted\n") << "the pipelined request after it";
  EXPECT_EQ(f.requests(), 2u);
  ::close(a);
}

TEST(StreamServer, AClientThatLeavesWhileItsInputIsPreparedTakesNothing) {
  Fixture f(1, true);
  const int a = f.connect();
  send_text(a, "prep:long\n");
  ASSERT_TRUE(f.poll_until([&] { return f.jobs.size() == 1; }));
  ::close(a);
  ASSERT_TRUE(f.poll_until([&] { return f.metrics.connections_open.load() == 0; })) << "the close is seen while preparing";
  f.run_jobs();
  f.io.poll();  // the job's completion finds no connection
  f.io.restart();
  EXPECT_EQ(f.requests(), 0u);
  EXPECT_EQ(f.slots.in_use(), 0);
  const int b = f.connect();  // the one slot is free
  send_text(b, "go\n");
  EXPECT_EQ(f.read_until(b, "started\n"), "started\n");
  ::close(b);
}

TEST(StreamServer, WithoutAnOffloadPoolDeferredWorkRunsInline) {
  Fixture f(4);
  const int a = f.connect();
  send_text(a, "prep:here\n");
  EXPECT_EQ(f.read_until(a, "started\n"), "started\n");
  EXPECT_EQ(std::get<Request>(f.work.back()).prompt, "here");
  EXPECT_EQ(f.metrics.inputs_prepared_off_io_total.load(), 0u);
  ::close(a);
}

// Closes a connection, then tries to make it idle again.
void reopen_a_closed_connection() {
  boost::asio::io_context io;
  boost::asio::local::stream_protocol::socket s1(io), s2(io);
  boost::asio::local::connect_pair(s1, s2);
  struct Owner final : ConnectionOwner {
    void on_input(const ConnectionPtr&, std::string_view) override {}
    void on_peer_eof(const ConnectionPtr&) override {}
    bool input_full(const Connection&) const override { return false; }
    void on_close(const ConnectionPtr&) override {}
    void on_failure(const ConnectionPtr&, const char*) override {}
  } owner;
  const ConnectionOptions options;
  auto c = std::make_shared<Connection>(std::move(s1), 1, options, owner);
  c->close("test");
  c->set_state(ConnState::kIdle);
}

TEST(ConnectionDeathTest, AnIllegalStateChangeAborts) {
  EXPECT_TRUE(conn_states().allows(ConnState::kIdle, ConnState::kBusy));
  EXPECT_TRUE(conn_states().allows(ConnState::kClosing, ConnState::kClosing));
  EXPECT_FALSE(conn_states().allows(ConnState::kClosing, ConnState::kIdle));
  EXPECT_FALSE(conn_states().allows(ConnState::kClosed, ConnState::kClosing));
  EXPECT_TRUE(conn_states().allows(ConnState::kIdle, ConnState::kPreparing));
  EXPECT_TRUE(conn_states().allows(ConnState::kPreparing, ConnState::kIdle));
  EXPECT_FALSE(conn_states().allows(ConnState::kBusy, ConnState::kPreparing));
  EXPECT_FALSE(conn_states().allows(ConnState::kPreparing, ConnState::kBusy));
  EXPECT_DEATH(reopen_a_closed_connection(), "connection 1: illegal transition closed -> idle");
}

}  // namespace
}  // namespace uma
