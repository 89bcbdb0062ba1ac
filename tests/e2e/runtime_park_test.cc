// LlamaRuntime's KV operations on an ordinary random model (attention matters here, unlike with
// the oracle), in both KV layouts (one unified pool; llama.cpp's per-sequence streams, where every
// reuse is a copy between streams): a sequence saved to host memory and restored under another
// sequence id, after the cache was reshuffled by other work, gives the same next-token logits as
// one never parked; its sampler (RNG state included) comes back with it; shared or restored
// prefixes, a sequence moved to another id, and a batch mixing decode rows with a prompt chunk in
// sequence-id order (how the scheduler builds it) give the logits of the plain computation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "e2e/tiny_runtime.h"
#include "runtime/llama_runtime.h"

namespace uma::test {
namespace {

std::unique_ptr<LlamaRuntime> open_tiny(const std::string& kv_layout) {
  auto rt = open_tiny_runtime([&](RuntimeConfig& cfg) { EXPECT_TRUE(parse_enum(kKvLayoutNames, kv_layout, &cfg.kv_layout)); });
  if (rt) {
    EXPECT_EQ(rt->kv_per_sequence(), kv_layout == "per-seq");
  }
  return rt;
}

class RuntimeKv : public ::testing::TestWithParam<std::string> {
 protected:
  std::unique_ptr<LlamaRuntime> open() { return open_tiny(GetParam()); }
};

std::vector<Token> prompt_tokens(int n, int salt) {
  std::vector<Token> t;
  for (int i = 0; i < n; ++i) t.push_back(1000 + (i * 37 + salt * 101) % 20000);
  return t;
}

// Feeds `tokens` at positions [from, from + size) of `seq`; logits for the last one.
void feed(LlamaRuntime& rt, std::int32_t seq, const std::vector<Token>& tokens, std::int32_t from = 0) {
  std::vector<BatchEntry> b;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    b.push_back({tokens[i], from + static_cast<std::int32_t>(i), seq, i + 1 == tokens.size()});
  }
  ASSERT_TRUE(rt.decode(b).ok());
}

std::vector<float> last_logits(LlamaRuntime& rt, std::size_t batch_size) {
  auto row = rt.logits(static_cast<std::int32_t>(batch_size - 1));
  return {row.begin(), row.end()};
}

void expect_close(const std::vector<float>& a, const std::vector<float>& b) {
  ASSERT_EQ(a.size(), b.size());
  float scale = 0;
  for (float x : a) scale = std::max(scale, std::fabs(x));
  for (std::size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-3f * scale) << "logit " << i;
  EXPECT_EQ(std::max_element(a.begin(), a.end()) - a.begin(), std::max_element(b.begin(), b.end()) - b.begin());
}

TEST_P(RuntimeKv, SavedKvRestoredUnderAnotherSequenceGivesTheSameLogits) {
  auto rt = open();
  ASSERT_TRUE(rt);
  SamplingParams greedy;
  const std::vector<Token> p = prompt_tokens(60, 1);
  for (std::size_t split : {1u, 31u, 32u, 59u}) {  // also the case of one token of KV
    const std::vector<Token> head(p.begin(), p.begin() + static_cast<long>(split));
    const std::vector<Token> tail(p.begin() + static_cast<long>(split), p.end());
    // Reference: never parked.
    ASSERT_TRUE(rt->start_sequence(0, greedy).ok());
    feed(*rt, 0, head);
    feed(*rt, 0, tail, static_cast<std::int32_t>(split));
    const std::vector<float> want = last_logits(*rt, tail.size());
    rt->end_sequence(0);

    ASSERT_TRUE(rt->start_sequence(1, greedy).ok());
    feed(*rt, 1, head);
    ParkedSequence parked;
    ASSERT_TRUE(rt->park_sequence(1, /*save_kv=*/true, parked).ok());
    EXPECT_GT(parked.bytes(), 0u);
    EXPECT_EQ(rt->kv_tokens(1), 0) << "parking frees the cells";
    ASSERT_TRUE(rt->start_sequence(2, greedy).ok());  // other work takes the freed cells
    feed(*rt, 2, prompt_tokens(40, 2));
    ASSERT_TRUE(rt->unpark_sequence(3, parked).ok());
    EXPECT_EQ(rt->kv_tokens(3), static_cast<std::int32_t>(split));
    feed(*rt, 3, tail, static_cast<std::int32_t>(split));
    expect_close(want, last_logits(*rt, tail.size()));
    rt->end_sequence(2);
    rt->end_sequence(3);
  }
}

// Per-sequence KV: a kept stream taken over in place (adopt_sequence: a new sampler, positions
// past the prefix removed) and the suffix prefilled give the logits of a full prefill, for cuts on
// and off the index's 32-token blocks and after the kept request had generated past its prompt.
TEST(RuntimeKvPerSeq, AKeptStreamTakenOverInPlacePlusSuffixMatchesAFullPrefill) {
  auto rt = open_tiny("per-seq");
  ASSERT_TRUE(rt);
  SamplingParams greedy;
  const std::vector<Token> p = prompt_tokens(100, 7);
  for (std::size_t cut : {1u, 32u, 45u, 99u}) {
    const std::vector<Token> head(p.begin(), p.begin() + static_cast<long>(cut));
    const std::vector<Token> tail(p.begin() + static_cast<long>(cut), p.end());
    ASSERT_TRUE(rt->start_sequence(0, greedy).ok());
    feed(*rt, 0, p);
    const std::vector<float> want = last_logits(*rt, p.size());
    rt->end_sequence(0);
    // The kept request: its prompt head and then tokens of its own reply, sampler dropped (kept).
    ASSERT_TRUE(rt->start_sequence(1, greedy).ok());
    feed(*rt, 1, head);
    feed(*rt, 1, prompt_tokens(20, 9), static_cast<std::int32_t>(cut));
    rt->drop_sampler(1);
    ASSERT_TRUE(rt->adopt_sequence(1, greedy, static_cast<std::int32_t>(cut)).ok());
    EXPECT_EQ(rt->kv_tokens(1), static_cast<std::int32_t>(cut)) << "the reply's positions removed";
    feed(*rt, 1, tail, static_cast<std::int32_t>(cut));
    expect_close(want, last_logits(*rt, tail.size()));
    rt->end_sequence(1);
  }
}

// The prefix cache's two ways of reusing KV — cells shared from another sequence
// (llama_memory_seq_cp) and a host snapshot restored — then the suffix prefilled, give the logits
// of a full prefill (relative 1e-3, same argmax), for splits on and off the index's 32-token blocks.
TEST_P(RuntimeKv, SharedOrRestoredPrefixPlusSuffixMatchesAFullPrefill) {
  auto rt = open();
  ASSERT_TRUE(rt);
  SamplingParams greedy;
  const std::vector<Token> p = prompt_tokens(100, 5);
  ASSERT_TRUE(rt->start_sequence(0, greedy).ok());
  feed(*rt, 0, p);
  const std::vector<float> want = last_logits(*rt, p.size());
  for (std::int32_t split : {1, 31, 32, 33, 64, 99}) {
    const std::vector<Token> tail(p.begin() + split, p.end());
    // Shared cells: seq 0 holds the whole prompt; seq 1 takes its first `split` positions.
    ASSERT_TRUE(rt->start_sequence(1, greedy).ok());
    rt->share_prefix(0, 1, split);
    EXPECT_EQ(rt->kv_tokens(1), split);
    feed(*rt, 1, tail, split);
    {
      SCOPED_TRACE("shared, split " + std::to_string(split));
      expect_close(want, last_logits(*rt, tail.size()));
    }
    rt->end_sequence(1);
    EXPECT_EQ(rt->kv_tokens(0), 100) << "the source keeps its cells";
    // Host snapshot of a sequence holding only the prefix, restored elsewhere.
    ASSERT_TRUE(rt->start_sequence(2, greedy).ok());
    rt->share_prefix(0, 2, split);
    HostBytes snapshot;
    if (rt->kv_per_sequence()) {
      // The copy between streams is queued until the next decode: reading it now would snapshot
      // the stream as it was. Any decode applies it.
      const Status early = rt->save_kv(2, snapshot);
      EXPECT_EQ(early.code(), ErrorCode::kKvPending) << early.to_string();
      ASSERT_TRUE(rt->start_sequence(1, greedy).ok());
      feed(*rt, 1, {4242});
      rt->end_sequence(1);
    }
    ASSERT_TRUE(rt->save_kv(2, snapshot).ok());
    rt->end_sequence(2);
    ASSERT_TRUE(rt->start_sequence(3, greedy).ok());
    ASSERT_TRUE(rt->restore_kv(3, snapshot).ok());
    feed(*rt, 3, tail, split);
    {
      SCOPED_TRACE("restored, split " + std::to_string(split));
      expect_close(want, last_logits(*rt, tail.size()));
    }
    rt->end_sequence(3);
  }
  rt->end_sequence(0);
}

TEST_P(RuntimeKv, TheSamplerComesBackWithItsRandomState) {
  auto rt = open();
  ASSERT_TRUE(rt);
  SamplingParams hot;
  hot.temperature = 1.5f;
  hot.seed = 7;
  const std::vector<Token> p = prompt_tokens(20, 3);
  auto run = [&](bool park_midway) {
    std::vector<Token> out;
    std::int32_t seq = 0;
    EXPECT_TRUE(rt->start_sequence(seq, hot).ok());
    feed(*rt, seq, p);
    Token t = rt->sample(seq, static_cast<std::int32_t>(p.size() - 1));
    for (int i = 0; i < 12; ++i) {
      out.push_back(t);
      if (park_midway && i == 5) {
        ParkedSequence parked;
        EXPECT_TRUE(rt->park_sequence(seq, true, parked).ok());
        seq = 2;
        EXPECT_TRUE(rt->unpark_sequence(seq, parked).ok());
      }
      feed(*rt, seq, {t}, static_cast<std::int32_t>(p.size()) + i);
      t = rt->sample(seq, 0);
    }
    rt->end_sequence(seq);
    return out;
  };
  const std::vector<Token> straight = run(false);
  EXPECT_EQ(run(true), straight);
}

// Per-sequence KV keeps running sequences dense by moving one to a lower id (a copy between
// streams); it must continue exactly where it was.
TEST_P(RuntimeKv, AMovedSequenceContinuesWithTheSameLogits) {
  auto rt = open();
  ASSERT_TRUE(rt);
  SamplingParams greedy;
  const std::vector<Token> p = prompt_tokens(70, 4);
  const std::vector<Token> next = prompt_tokens(5, 9);
  ASSERT_TRUE(rt->start_sequence(3, greedy).ok());
  feed(*rt, 3, p);
  feed(*rt, 3, next, 70);
  const std::vector<float> want = last_logits(*rt, next.size());
  rt->end_sequence(3);

  ASSERT_TRUE(rt->start_sequence(3, greedy).ok());
  feed(*rt, 3, p);
  ASSERT_TRUE(rt->start_sequence(1, greedy).ok());  // a neighbour with KV of its own
  feed(*rt, 1, prompt_tokens(30, 6));
  HostBytes other;
  ASSERT_TRUE(rt->save_kv(1, other).ok());
  rt->move_sequence(3, 0);
  if (rt->kv_per_sequence()) {
    // Until the next decode copies stream 3 into 0, writing 3 would change what 0 gets.
    EXPECT_EQ(rt->restore_kv(3, other).code(), ErrorCode::kKvPending);
  }
  EXPECT_EQ(rt->kv_tokens(3), 0);
  EXPECT_EQ(rt->kv_tokens(0), 70);
  EXPECT_EQ(rt->kv_tokens(1), 30) << "the neighbour is untouched";
  feed(*rt, 0, next, 70);
  expect_close(want, last_logits(*rt, next.size()));
  rt->end_sequence(0);
  rt->end_sequence(1);
}

// One decode that carries decode rows of sequences 0 and 2 and a prompt chunk of sequence 1
// between them, in id order (build_batch's order), gives every row the logits of the same work
// done one sequence at a time.
TEST_P(RuntimeKv, AMixedBatchInSequenceOrderGivesEachRowItsLogits) {
  auto rt = open();
  ASSERT_TRUE(rt);
  SamplingParams greedy;
  const std::vector<Token> p0 = prompt_tokens(40, 1), p1 = prompt_tokens(50, 2), p2 = prompt_tokens(45, 3);
  const Token t0 = 4242, t2 = 777;
  const std::vector<Token> head1(p1.begin(), p1.begin() + 20), tail1(p1.begin() + 20, p1.end());
  // One sequence at a time.
  std::vector<std::vector<float>> want;
  for (std::int32_t seq : {0, 1, 2}) ASSERT_TRUE(rt->start_sequence(seq, greedy).ok());
  feed(*rt, 0, p0);
  feed(*rt, 0, {t0}, 40);
  want.push_back(last_logits(*rt, 1));
  feed(*rt, 1, head1);
  feed(*rt, 1, tail1, 20);
  want.push_back(last_logits(*rt, tail1.size()));
  feed(*rt, 2, p2);
  feed(*rt, 2, {t2}, 45);
  want.push_back(last_logits(*rt, 1));
  for (std::int32_t seq : {0, 1, 2}) rt->end_sequence(seq);

  // Together.
  for (std::int32_t seq : {0, 1, 2}) ASSERT_TRUE(rt->start_sequence(seq, greedy).ok());
  feed(*rt, 0, p0);
  feed(*rt, 1, head1);
  feed(*rt, 2, p2);
  std::vector<BatchEntry> b;
  b.push_back({t0, 40, 0, true});
  for (std::size_t i = 0; i < tail1.size(); ++i) {
    b.push_back({tail1[i], 20 + static_cast<std::int32_t>(i), 1, i + 1 == tail1.size()});
  }
  b.push_back({t2, 45, 2, true});
  ASSERT_TRUE(rt->decode(b).ok());
  const std::int32_t rows[] = {0, static_cast<std::int32_t>(tail1.size()), static_cast<std::int32_t>(b.size() - 1)};
  for (int i = 0; i < 3; ++i) {
    const auto row = rt->logits(rows[i]);
    expect_close(want[static_cast<std::size_t>(i)], {row.begin(), row.end()});
  }
  for (std::int32_t seq : {0, 1, 2}) rt->end_sequence(seq);
}

INSTANTIATE_TEST_SUITE_P(Layouts, RuntimeKv, ::testing::Values("unified", "per-seq"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param == "per-seq" ? std::string("PerSeq") : std::string("Unified");
                         });

}  // namespace
}  // namespace uma::test
