// End-to-end: the real umad serving the oracle model, whose greedy continuation of any prompt is
// known exactly (next token = last token + 1), so cross-talk, lost or duplicated tokens, and wrong
// logits rows show up as wrong bytes.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <memory>
#include <thread>

#include "e2e/daemon_harness.h"
#include "e2e/oracle.h"
#include "ipc/newline_wire.h"

namespace uma::test {
namespace {

using namespace std::chrono_literals;


nlohmann::json metrics_of(const Daemon& d) { return nlohmann::json::parse(fetch_metrics(d.socket())); }

const std::vector<std::string> kWords = {"world", "apple", "river", "stone", "music", "garden", "yellow", "window",
                                         "castle", "rabbit", "silver", "pencil", "forest", "candle", "bridge", "ocean"};

TEST(UmadE2E, SingleClientGetsTheOracleContinuation) {
  Daemon d({"--max-tokens", "24"});
  ASSERT_TRUE(d.started()) << d.log();
  Client c(d.socket());
  ASSERT_TRUE(c.send("hello world\n"));
  const auto line = c.read_line();
  ASSERT_TRUE(line.has_value());
  EXPECT_EQ(*line, oracle().expected_reply("hello world", 24));
  const auto m = metrics_of(d);
  EXPECT_EQ(m["tokens_generated_total"], 24);
  EXPECT_EQ(m["requests_completed_total"], 1);
  EXPECT_EQ(m["active_sessions"], 0);
  EXPECT_EQ(m["kv_tokens_used"], 0);
  for (const char* key : {"batch_calls_total", "last_batch_size", "decode_ms_last", "decode_ms_ewma", "ttft_ms_last",
                          "tick_predict_error", "bytes_per_token_last"}) {
    EXPECT_TRUE(m.contains(key)) << key;
  }
  // The tick cost model predicted the ticks (warm from the calibration or from the first ticks), and
  // the request has its bytes.
  EXPECT_GT(m["tick_predicted_ms"].get<double>(), 0.0);
  EXPECT_GT(m["bytes_per_token_last"].get<double>(), 0.0);
  EXPECT_EQ(d.stop(), 0) << d.log();
}

// Sixteen concurrent oracle streams, each checked token for token; `extra` picks the variant.
void run_sixteen_concurrent_clients(std::vector<std::string> extra) {
  std::vector<std::string> args = {"--max-tokens", "48", "--max-sessions", "16"};
  args.insert(args.end(), extra.begin(), extra.end());
  Daemon d(args);
  ASSERT_TRUE(d.started()) << d.log();
  // Every client connected before any sends: the 16 prompts go out back to back, to be batched.
  std::vector<std::unique_ptr<Client>> clients;
  for (std::size_t i = 0; i < kWords.size(); ++i) clients.push_back(std::make_unique<Client>(d.socket()));
  for (std::size_t i = 0; i < kWords.size(); ++i) ASSERT_TRUE(clients[i]->send("the " + kWords[i] + "\n"));
  std::vector<std::string> got(kWords.size());
  std::vector<std::thread> readers;
  for (size_t i = 0; i < kWords.size(); ++i) {
    readers.emplace_back([&, i] { got[i] = clients[i]->read_line().value_or("<timeout>"); });
  }
  for (auto& t : readers) t.join();
  for (size_t i = 0; i < kWords.size(); ++i) {
    EXPECT_EQ(got[i], oracle().expected_reply("the " + kWords[i], 48)) << "client " << i;
  }
  const auto m = metrics_of(d);
  EXPECT_EQ(m["tokens_generated_total"], 16 * 48);
  // Batching happened: far fewer decodes than tokens.
  EXPECT_LT(m["batch_calls_total"].get<int>(), 16 * 48 / 2);
  EXPECT_EQ(d.stop(), 0);
}

TEST(UmadE2E, SixteenConcurrentClientsEachGetExactlyTheirOwnContinuation) { run_sixteen_concurrent_clients({}); }

// The GPU's defaults on the CPU: greedy picked by llama.cpp's backend sampler inside the decode's
// graph (only token ids reach the host), per-sequence KV. Same bytes as the host's argmax.
TEST(UmadE2E, SixteenConcurrentClientsSampledOnTheDeviceGetTheSameContinuations) {
  run_sixteen_concurrent_clients({"--backend-sampling", "on", "--kv-layout", "per-seq"});
}

TEST(UmadE2E, RunningStreamsKeepReceivingTokensWhileALongPromptPrefills) {
  // Streams of 600 tokens: far more than the long prompt's 16+ prefill ticks, which start a few
  // syscalls after their first bytes.
  constexpr int kStreamTokens = 600;
  Daemon d({"--max-tokens", std::to_string(kStreamTokens), "--n-batch", "128", "--n-ctx", "8192"});
  ASSERT_TRUE(d.started()) << d.log();
  const std::string long_prompt = Oracle::long_prompt(2000, "ocean");
  ASSERT_GE(oracle().tokenize(long_prompt).size(), 2000u);
  std::vector<std::unique_ptr<Client>> streams;
  for (int i = 0; i < 3; ++i) {
    streams.push_back(std::make_unique<Client>(d.socket()));
    ASSERT_TRUE(streams.back()->send("the " + kWords[i] + "\n"));
  }
  for (auto& s : streams) ASSERT_FALSE(s->read_some(kHangGuard).empty()) << "timed out waiting for a stream's first bytes";
  // The streams are not read while the long prompt prefills: what the daemon sent them before the
  // long prompt's first byte is in their sockets when that byte comes (it writes each tick's
  // events before the next tick's, give or take a write in flight), so how fast this client reads
  // does not move it. Bytes that came just before the send or just after that byte only add to
  // the count.
  std::vector<std::string> got(3);
  std::vector<std::size_t> bytes_before(3), bytes_by_then(3);
  for (int i = 0; i < 3; ++i) {
    got[i] = streams[i]->read_some(0ms);
    bytes_before[i] = streams[i]->bytes_received;
  }
  Client big(d.socket());
  ASSERT_TRUE(big.send(long_prompt + "\n"));
  std::string big_reply = big.read_some(kHangGuard);
  ASSERT_FALSE(big_reply.empty()) << "timed out waiting for the long prompt's first token";
  for (int i = 0; i < 3; ++i) {
    // Everything buffered at once (one read takes up to 64 KiB; the streams hold far less).
    got[i] += streams[i]->read_some(0ms);
    bytes_by_then[i] = streams[i]->bytes_received;
    ASSERT_EQ(got[i].find('\n'), std::string::npos) << "stream " << i << " ended before the long prompt's first token";
  }
  std::vector<std::thread> readers;
  for (int i = 0; i < 3; ++i) readers.emplace_back([&, i] { got[i] += streams[i]->read_line().value_or("<timeout>"); });
  if (const std::size_t nl = big_reply.find('\n'); nl != std::string::npos) {
    big_reply.resize(nl);
  } else {
    big_reply += big.read_line().value_or("<timeout>");
  }
  for (auto& t : readers) t.join();
  EXPECT_EQ(big_reply, oracle().expected_reply(long_prompt, kStreamTokens));

  for (int i = 0; i < 3; ++i) {
    // got[i] excludes the bytes read before the long prompt; compare the tail.
    const std::string want = oracle().expected_reply("the " + kWords[i], kStreamTokens);
    ASSERT_GE(want.size(), got[i].size());
    EXPECT_EQ(want.substr(want.size() - got[i].size()), got[i]) << "stream " << i;
    // Tokens that reached the stream while the long prompt prefilled: the expected reply's piece
    // boundaries between the bytes it had when the prompt was sent and when its first byte came.
    // (Counted in tokens, not reads: on a GPU a tick takes ~2 ms and reads coalesce several.)
    int tokens_during_prefill = 0;
    std::string escaped;
    for (const std::string& piece : oracle().expected_pieces("the " + kWords[i], kStreamTokens)) {
      append_escaped(escaped, piece);
      tokens_during_prefill += escaped.size() > bytes_before[i] && escaped.size() <= bytes_by_then[i];
    }
    // 2000 prompt tokens with at most 128 per decode take >= 16 ticks; each tick feeds every stream.
    EXPECT_GE(tokens_during_prefill, 4) << "stream " << i << " stalled while the long prompt prefilled";
  }
  EXPECT_EQ(d.stop(), 0);
}

TEST(UmadE2E, SessionIsReusedForSeveralPrompts) {
  Daemon d({"--max-tokens", "10"});
  ASSERT_TRUE(d.started()) << d.log();
  Client c(d.socket());
  for (const std::string w : {"apple", "river", "stone"}) {
    ASSERT_TRUE(c.send("a " + w + "\r\n"));  // CRLF is accepted too
    EXPECT_EQ(c.read_line().value_or("<timeout>"), oracle().expected_reply("a " + w, 10));
  }
  // Two prompts in one write are served one after the other.
  ASSERT_TRUE(c.send("one garden\none window\n"));
  EXPECT_EQ(c.read_line().value_or(""), oracle().expected_reply("one garden", 10));
  EXPECT_EQ(c.read_line().value_or(""), oracle().expected_reply("one window", 10));
  EXPECT_EQ(metrics_of(d)["requests_completed_total"], 5);
}

TEST(UmadE2E, BadInputsGetTheirErrorLinesAndTheSessionSurvives) {
  Daemon d({"--max-tokens", "8", "--max-prompt-bytes", "1024"});
  ASSERT_TRUE(d.started()) << d.log();
  Client c(d.socket());
  ASSERT_TRUE(c.send(std::string(5000, 'x') + "\n"));
  EXPECT_EQ(c.read_line(), "error: prompt too large");
  ASSERT_TRUE(c.send("bad \xC3\x28 bytes\n"));
  EXPECT_EQ(c.read_line(), "error: invalid utf-8");
  ASSERT_TRUE(c.send(std::string("nul\0inside\n", 11)));
  EXPECT_EQ(c.read_line(), "error: nul byte in prompt");
  ASSERT_TRUE(c.send("\n"));
  EXPECT_EQ(c.read_line(), "error: empty prompt");
  ASSERT_TRUE(c.send("still works\n"));
  EXPECT_EQ(c.read_line().value_or(""), oracle().expected_reply("still works", 8));
  const auto m = metrics_of(d);
  EXPECT_EQ(m["errors_total"]["prompt_too_large"], 1);
  EXPECT_EQ(m["errors_total"]["invalid_utf8"], 1);
  EXPECT_EQ(m["errors_total"]["contains_nul"], 1);
}

TEST(UmadE2E, DisconnectMidStreamFreesTheSessionAndItsKv) {
  // 8000 tokens: the disconnect lands long before the end, however slow the machine.
  Daemon d({"--max-tokens", "8000", "--n-ctx", "8192"});
  ASSERT_TRUE(d.started()) << d.log();
  {
    Client c(d.socket());
    ASSERT_TRUE(c.send("hello world\n"));
    ASSERT_FALSE(c.read_some(kHangGuard).empty()) << "timed out waiting for the first bytes";
    // The gauges are refreshed every 20 ms while streams run: wait for the ones that count it.
    nlohmann::json busy;
    EXPECT_TRUE(eventually([&] {
      busy = metrics_of(d);
      return busy["active_sessions"] == 1 && busy["kv_tokens_used"].get<int>() > 0;
    }, "the running session in the gauges")) << busy.dump();
    EXPECT_EQ(busy["active_sessions"], 1);
    EXPECT_GT(busy["kv_tokens_used"].get<int>(), 0);
  }  // closes mid-stream
  nlohmann::json m;
  EXPECT_TRUE(eventually([&] {
    m = metrics_of(d);
    return m["active_sessions"] == 0 && m["kv_tokens_used"] == 0 && m["sessions_open"] == 0;
  }, "the session and its KV to be freed")) << m.dump();
  EXPECT_EQ(m["active_sessions"], 0);
  EXPECT_EQ(m["kv_tokens_used"], 0);
  EXPECT_EQ(m["kv_sequences_used"], 0);
  EXPECT_EQ(m["kv_cells_granted"], 0);
  EXPECT_EQ(m["requests_cancelled_total"], 1);
  EXPECT_EQ(m["disconnects_mid_stream_total"], 1);
  EXPECT_LT(m["tokens_generated_total"].get<int>(), 8000) << "generation went on after the client left";
}

TEST(UmadE2E, DisconnectDuringPrefillCancelsBeforeTheFirstToken) {
  Daemon d({"--max-tokens", "16", "--n-batch", "32", "--n-ctx", "8192"});
  ASSERT_TRUE(d.started()) << d.log();
  {
    Client c(d.socket());
    ASSERT_TRUE(c.send(Oracle::long_prompt(6000, "ocean") + "\n"));
  }  // gone right after the prompt, long before its ~190 prefill ticks are done
  nlohmann::json m;
  EXPECT_TRUE(eventually([&] {
    m = metrics_of(d);
    return m["requests_cancelled_total"] == 1 && m["active_sessions"] == 0 && m["kv_tokens_used"] == 0;
  }, "the cancel to free the session")) << m.dump();
  EXPECT_EQ(m["requests_cancelled_total"], 1);
  EXPECT_EQ(m["tokens_generated_total"], 0) << "the prompt was prefilled to the end for nobody";
  EXPECT_EQ(m["kv_tokens_used"], 0);
}

TEST(UmadE2E, HalfClosedClientStillGetsItsReply) {
  Daemon d({"--max-tokens", "12"});
  ASSERT_TRUE(d.started()) << d.log();
  Client c(d.socket());
  ASSERT_TRUE(c.send("hello world\n"));
  c.shutdown_write();
  EXPECT_EQ(c.read_line().value_or("<none>"), oracle().expected_reply("hello world", 12));
  EXPECT_TRUE(c.wait_closed(kHangGuard));
}

// With no line for a session (--max-queue 0; by default the extra request waits its turn).
TEST(UmadE2E, SessionCapRejectsTheExtraClientWithAnErrorLine) {
  Daemon d({"--max-tokens", "2000", "--max-sessions", "2", "--n-ctx", "8192", "--max-queue", "0"});
  ASSERT_TRUE(d.started()) << d.log();
  Client a(d.socket()), b(d.socket()), extra(d.socket());
  ASSERT_TRUE(a.send("the apple\n"));
  ASSERT_TRUE(b.send("the river\n"));
  ASSERT_FALSE(a.read_some(kHangGuard).empty()) << "timed out waiting for a's first bytes";
  ASSERT_FALSE(b.read_some(kHangGuard).empty()) << "timed out waiting for b's first bytes";
  ASSERT_TRUE(extra.send("the stone\n"));
  EXPECT_EQ(extra.read_line(), "error: too many sessions");
  EXPECT_TRUE(extra.wait_closed(kHangGuard));
  // Metrics need no session slot.
  EXPECT_TRUE(eventually([&] { return metrics_of(d)["sessions_open"] == 2; }, "two sessions open"));
}

TEST(UmadE2E, SlowReaderIsDroppedAtTheTxCap) {
  // A small socket buffer on the client side makes the server's TX queue fill quickly.
  Daemon d({"--max-tokens", "6000", "--n-ctx", "8192", "--max-tx-kib", "4"});
  ASSERT_TRUE(d.started()) << d.log();
  Client slow(d.socket());
  ASSERT_TRUE(slow.send("hello world\n"));  // and never read
  nlohmann::json m;
  EXPECT_TRUE(eventually([&] {
    m = metrics_of(d);
    return m["tx_drops_total"] == 1 && m["active_sessions"] == 0;
  }, "the slow reader to be dropped")) << m.dump();
  EXPECT_EQ(m["tx_drops_total"], 1);
  EXPECT_EQ(m["active_sessions"], 0);
  EXPECT_EQ(m["kv_tokens_used"], 0);
  // Other clients are unaffected.
  Client ok(d.socket());
  ASSERT_TRUE(ok.send("the apple\n"));
  EXPECT_TRUE(ok.read_some(kHangGuard).size() > 0) << "timed out waiting for another client's reply";
}

}  // namespace
}  // namespace uma::test
