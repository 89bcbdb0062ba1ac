// End-to-end scheduling with the oracle model over the JSON protocol: request classes, preemption
// (a paused and resumed stream is exactly the stream never paused), per-tenant caps, and the
// metrics that show it.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "e2e/json_helpers.h"
#include "e2e/oracle.h"

namespace uma::test {
namespace {

// n_ctx 1024: a background request with a 1000-word prompt leaves too few cells for an
// interactive one to start, so the interactive one pauses the background one.
void preempt_and_resume(const std::string& mode, const std::string& metric) {
  Daemon d(args({"--n-ctx", "1024", "--preempt", mode}));
  ASSERT_TRUE(d.started()) << d.log();
  auto bg = connect(d);
  auto fg = connect(d);  // connected now: once bg streams only the request is left to send
  const std::string bg_prompt = Oracle::long_prompt(1000, "river");
  WireRequest r = request("bg", bg_prompt, 20);
  r.background = true;
  ASSERT_TRUE(bg->send_request(r).ok());
  WireEvent ev;
  std::string bg_text;
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(bg->read_event(&ev, kHangGuardMs).ok()) << "timed out waiting for token " << i << " of the background request";
    bg_text += ev.text;
  }
  ASSERT_TRUE(fg->send_request(request("fg", "hello world", 600)).ok());
  const Reply fg_reply = read_reply(*fg);
  EXPECT_EQ(fg_reply.text, oracle().expected_text("hello world", 600));
  EXPECT_EQ(fg_reply.end.reason, "length");
  const Reply bg_rest = read_reply(*bg);
  EXPECT_EQ(bg_text + bg_rest.text, oracle().expected_text(bg_prompt, 20)) << "paused and resumed exactly";
  EXPECT_EQ(bg_rest.end.completion_tokens, 20);
  const auto m = metrics(d);
  EXPECT_EQ(m[metric], 1) << m.dump();
  EXPECT_EQ(m["preempted_priority_total"], 1);
  EXPECT_EQ(m["resumed_total"], 1);
  EXPECT_EQ(m["kv_tokens_used"], 0);
  EXPECT_EQ(m["parked_bytes"], 0);
}

TEST(UmadSched, BackgroundPausedWithSavedKvResumesExactly) {
  preempt_and_resume("save", "preempted_saved_total");
}

TEST(UmadSched, BackgroundPausedWithDroppedKvRecomputesExactly) {
  preempt_and_resume("recompute", "preempted_recomputed_total");
}

TEST(UmadSched, TenantCapRejectsTheExtraRequestWithATypedError) {
  Daemon d(args({"--max-tokens", "4000", "--n-ctx", "8192", "--tenant-max-requests", "1"}));
  ASSERT_TRUE(d.started()) << d.log();
  auto a = connect(d);
  WireRequest r = request("a", "hello world", 4000);
  r.tenant = "acme";
  ASSERT_TRUE(a->send_request(r).ok());
  WireEvent ev;
  ASSERT_TRUE(a->read_event(&ev, kHangGuardMs).ok()) << "timed out waiting for a's first token";
  auto b = connect(d);
  r.id = "b";
  ASSERT_TRUE(b->send_request(r).ok());
  ASSERT_TRUE(b->read_event(&ev, kHangGuardMs).ok()) << "timed out waiting for b's answer";
  EXPECT_EQ(ev.kind, WireEvent::Kind::kError);
  EXPECT_EQ(ev.code, "E_OVERLOADED");
  EXPECT_NE(ev.message.find("acme"), std::string::npos) << ev.message;
  auto c = connect(d);  // another tenant is not affected
  WireRequest other = request("c", "the river", 5);
  other.tenant = "globex";
  ASSERT_TRUE(c->send_request(other).ok());
  EXPECT_EQ(read_reply(*c).text, oracle().expected_text("the river", 5));
  ASSERT_TRUE(a->send_cancel("a").ok());
  read_reply(*a);
  const auto m = metrics(d);
  EXPECT_EQ(m["rejected_total"]["tenant_cap"], 1);
  EXPECT_EQ(m["requests_admitted_total"], 2);
}

TEST(UmadSched, BackgroundWorkIsNotStarvedByAStreamOfInteractiveWork) {
  // With --preempt off each request is granted its worst case up front: room for one reply at a
  // time; two interactive clients keep one request running and one waiting. The background
  // request, past its wait bound (300 ms), ranks as urgent, and being the oldest, gets the next
  // turn. Without the bound it would wait until the interactive load stops, which here it does
  // only once the background reply is in: starved, it fails at the hang guard.
  Daemon d(args({"--n-ctx", "512", "--background-max-wait-ms", "300", "--preempt", "off"}));
  ASSERT_TRUE(d.started()) << d.log();
  std::atomic<bool> stop{false};
  auto interactive_load = [&](const std::string& name) {
    for (int i = 0; !stop; ++i) {
      auto c = connect(d);
      if (!c || !c->send_request(request(name + std::to_string(i), "hello world", 300)).ok()) return;
      read_reply(*c);
    }
  };
  std::thread a(interactive_load, "a"), b(interactive_load, "b");
  // The load is on: one interactive request running and one waiting.
  const ::testing::AssertionResult loaded = eventually([&] {
    const auto m = metrics(d);
    return m["active_sessions"] == 1 && m["queued_sessions"] == 1;
  }, "one interactive request running and one waiting");
  if (!loaded) {
    stop = true;
    a.join();
    b.join();
  }
  ASSERT_TRUE(loaded);
  auto bg = connect(d);
  WireRequest r = request("bg", "the river", 250);  // 253 + 303 cells > 512
  r.background = true;
  ASSERT_TRUE(bg->send_request(r).ok());
  const Reply reply = read_reply(*bg);
  stop = true;
  a.join();
  b.join();
  EXPECT_EQ(reply.text, oracle().expected_text("the river", 250)) << "starved behind the interactive load";
  EXPECT_EQ(reply.end.reason, "length");
}

TEST(UmadSched, ARequestWaitingPastTheQueueAgeLimitIsRejected) {
  // --preempt off: room for one 3000-token reply at a time; the second waits for room, then times out.
  Daemon d(args({"--n-ctx", "4096", "--max-queue-ms", "300", "--preempt", "off"}));
  ASSERT_TRUE(d.started()) << d.log();
  auto a = connect(d);
  ASSERT_TRUE(a->send_request(request("a", "hello world", 3000)).ok());
  WireEvent ev;
  ASSERT_TRUE(a->read_event(&ev, kHangGuardMs).ok()) << "timed out waiting for a's first token";
  auto b = connect(d);
  const auto sent = std::chrono::steady_clock::now();
  ASSERT_TRUE(b->send_request(request("b", "the river", 3000)).ok());
  const Reply rb = read_reply(*b);
  const double waited = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - sent).count();
  EXPECT_EQ(rb.end.kind, WireEvent::Kind::kError);
  EXPECT_EQ(rb.end.code, "E_OVERLOADED");
  EXPECT_GE(waited, 300.0) << "rejected before its age limit";  // a slower machine only waits longer
  ASSERT_TRUE(a->send_cancel("a").ok());
  read_reply(*a);
  EXPECT_EQ(metrics(d)["rejected_total"]["queue_timeout"], 1);
}

TEST(UmadSched, SessionsByStateAndAdmissionCountersInPrometheus) {
  Daemon d(args({"--max-tokens", "64"}));
  ASSERT_TRUE(d.started()) << d.log();
  auto c = connect(d);
  ASSERT_TRUE(c->send_request(request("x", "hello world", 8)).ok());
  read_reply(*c);
  std::string text;
  ASSERT_EQ(run_command({bin_path("uma-cli"), "-s", d.socket(), "metrics", "--prometheus"}, &text), 0) << text;
  for (const char* line : {"uma_requests_admitted_total 1\n", "uma_num_requests{state=\"paused\"} 0\n",
                           "uma_requests_rejected_total{reason=\"queue_full\"} 0\n",
                           "uma_preemptions_total{kv=\"saved\"} 0\n", "uma_kv_cache_cells ",
                           "uma_preemptions_by_cause_total{cause=\"kv_full\"} 0\n", "uma_pause_duration_seconds_count 0\n",
                           "uma_kv_cache_cells_granted 0\n"}) {
    EXPECT_NE(text.find(line), std::string::npos) << line << " missing in\n" << text;
  }
}

}  // namespace
}  // namespace uma::test
