// Per-sequence KV batches arranged for llama.cpp's split (runtime/stream_batch.h) against the
// same batches given to llama.cpp as they come: every output row's logits agree (within a
// tolerance: the passes differ, so the arithmetic's grouping may), the fillers written into idle
// streams and the padding after prompt chunks come out again (those sequences carry on alike, and
// a leftover cell would make llama.cpp reject their next position), and the arranged runtime
// really used them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "e2e/tiny_runtime.h"
#include "runtime/argmax.h"
#include "runtime/llama_runtime.h"

namespace uma::test {
namespace {

std::unique_ptr<LlamaRuntime> open_per_seq(bool stream_batches, std::int64_t deep_pass_row_cells = 0,
                                           std::int32_t n_ctx = 2048, std::int32_t pad_entries_per_pass = 0,
                                           std::int32_t graphs_kept = 0) {
  return open_tiny_runtime([&](RuntimeConfig& cfg) {
    cfg.n_ctx = n_ctx;
    cfg.n_seq_max = 8;
    cfg.kv_layout = KvLayout::kPerSeq;
    cfg.backend_sampling = DeviceSampling::kOff;
    cfg.stream_batches = stream_batches;
    cfg.deep_pass_row_cells = deep_pass_row_cells;
    cfg.pad_entries_per_pass = pad_entries_per_pass;
    cfg.graphs_kept = graphs_kept;
  });
}

class Lockstep {
 public:
  Lockstep(LlamaRuntime& a, LlamaRuntime& b) : a_(a), b_(b) {}
  void start(std::int32_t seq, std::vector<Token> p) {
    ASSERT_TRUE(a_.start_sequence(seq, SamplingParams{}).ok());
    ASSERT_TRUE(b_.start_sequence(seq, SamplingParams{}).ok());
    seqs_[seq] = {std::move(p), 0, false};
  }
  // One decode of the named sequences' pending tokens (in id order, as the scheduler builds it);
  // both runtimes get the token `a` picks, so they stay on one path whatever the logits.
  // With `drafts` > 0 each sequence then gets its next token and that many more, every one an
  // output row (a verifying tick's shape), all compared.
  void step(const std::set<std::int32_t>& active, std::int32_t drafts = 0) {
    std::vector<BatchEntry> batch;
    std::map<std::int32_t, std::pair<std::int32_t, std::int32_t>> rows;  // first and last output row
    for (std::int32_t seq : active) {
      Seq& s = seqs_.at(seq);
      const std::size_t n = s.pending.size();
      const bool all = s.all_outputs;
      rows[seq].first = static_cast<std::int32_t>(batch.size() + (all ? 0 : n - 1));
      for (std::size_t i = 0; i < n; ++i) batch.push_back({s.pending[i], s.pos++, seq, all || i + 1 == n});
      rows[seq].second = static_cast<std::int32_t>(batch.size()) - 1;
    }
    const Status sa = a_.decode(batch), sb = b_.decode(batch);
    ASSERT_TRUE(sa.ok()) << sa.message();
    ASSERT_TRUE(sb.ok()) << sb.message();
    for (std::int32_t seq : active) {
      Token next = 0;
      for (std::int32_t r = rows[seq].first; r <= rows[seq].second; ++r) {
        const std::span<const float> la = a_.logits(r), lb = b_.logits(r);
        ASSERT_EQ(la.size(), lb.size());
        ASSERT_FALSE(la.empty()) << "row " << r;
        float scale = 1.0f, diff = 0.0f;
        for (std::size_t k = 0; k < la.size(); ++k) {
          scale = std::max(scale, std::fabs(lb[k]));
          diff = std::max(diff, std::fabs(la[k] - lb[k]));
        }
        worst_ = std::max(worst_, diff / scale);
        next = argmax_first(la.data(), static_cast<std::int32_t>(la.size()));
        ++rows_;
      }
      Seq& s = seqs_.at(seq);
      s.pending = {next};
      for (std::int32_t k = 1; k <= drafts; ++k) s.pending.push_back(500 + (next + 97 * k) % 20000);
      s.all_outputs = drafts > 0;
    }
  }
  float worst() const { return worst_; }
  int rows() const { return rows_; }

 private:
  struct Seq {
    std::vector<Token> pending;
    std::int32_t pos = 0;
    bool all_outputs = false;  // every pending token an output row
  };
  LlamaRuntime &a_, &b_;
  std::map<std::int32_t, Seq> seqs_;
  float worst_ = 0.0f;
  int rows_ = 0;
};

TEST(StreamBatches, ArrangedBatchesGiveTheSameLogitsAndLeaveIdleStreamsAsTheyWere) {
  auto arranged = open_per_seq(true);
  auto plain = open_per_seq(false);
  ASSERT_TRUE(arranged && plain);
  ASSERT_TRUE(arranged->kv_per_sequence());
  Lockstep run(*arranged, *plain);
  for (std::int32_t seq : {0, 1, 2, 3, 4}) run.start(seq, tiny_prompt(5 + 7 * seq, seq));
  run.step({0, 1, 2, 3, 4});
  // 2 and 3 sit idle with their KV (a request between turns, a paused one) while 0, 1 and 4
  // decode: ids 2 and 3 are a gap between decode rows, filled each decode.
  const std::int32_t kv2 = arranged->kv_tokens(2), kv3 = arranged->kv_tokens(3);
  for (int i = 0; i < 4; ++i) run.step({0, 1, 4});
  EXPECT_EQ(arranged->kv_tokens(2), kv2) << "the filler's cell was taken out again";
  EXPECT_EQ(arranged->kv_tokens(3), kv3);
  const std::uint64_t fillers = arranged->fillers_total();
  EXPECT_EQ(fillers, 8u) << "two idle ids, four decodes";
  // A prompt arrives at 6 (id 5 free, empty): it sits among the decode rows' ids.
  run.start(6, tiny_prompt(33, 6));
  run.step({0, 1, 4, 6});
  for (int i = 0; i < 3; ++i) run.step({0, 1, 4, 6});
  // The idle ones resume where they were; a new prompt at 7 joins.
  run.start(7, tiny_prompt(12, 7));
  run.step({0, 1, 2, 3, 4, 6, 7});
  for (int i = 0; i < 5; ++i) run.step({0, 1, 2, 3, 4, 6, 7});
  EXPECT_GT(arranged->fillers_total(), fillers) << "id 5 filled once the prompt at 6 came";
  EXPECT_EQ(plain->fillers_total(), 0u);
  EXPECT_EQ(run.rows(), 5 + 4 * 3 + 4 * 4 + 6 * 7);
  EXPECT_LT(run.worst(), 1e-3f) << "largest logit difference, relative to the row's largest logit";
}

// Prompts of unequal length arriving at consecutive ids beside decode rows: their chunks are padded
// to one length (one pass for the three), every output row's logits as the plain batches give, and
// the padded sequences decode on from their own last position.
TEST(StreamBatches, PaddedPromptChunksGiveTheSameLogitsAndLeaveNoCellsBehind) {
  auto arranged = open_per_seq(true, 0, 2048, /*pad_entries_per_pass=*/64);
  auto plain = open_per_seq(false);
  ASSERT_TRUE(arranged && plain);
  Lockstep run(*arranged, *plain);
  for (std::int32_t seq : {0, 1, 5}) run.start(seq, tiny_prompt(6 + seq, seq));
  run.step({0, 1, 5});
  for (int i = 0; i < 2; ++i) run.step({0, 1, 5});
  EXPECT_EQ(arranged->pad_entries_total(), 1u) << "the first prompts at 0 and 1: 5 and 6 tokens after the first";
  run.start(2, tiny_prompt(20, 2));
  run.start(3, tiny_prompt(15, 3));
  run.start(4, tiny_prompt(24, 4));
  run.step({0, 1, 2, 3, 4, 5});
  EXPECT_EQ(arranged->pad_entries_total(), 1u + 4u + 9u) << "2 and 3 padded to 4's 23 tokens after the first";
  EXPECT_EQ(arranged->kv_tokens(2), 20);
  EXPECT_EQ(arranged->kv_tokens(3), 15);
  EXPECT_EQ(arranged->kv_tokens(4), 24);
  for (int i = 0; i < 6; ++i) run.step({0, 1, 2, 3, 4, 5});
  EXPECT_EQ(arranged->kv_tokens(3), 15 + 6);
  EXPECT_EQ(plain->pad_entries_total(), 0u);
  EXPECT_EQ(run.rows(), 3 * 3 + 6 * 7);
  EXPECT_LT(run.worst(), 1e-3f) << "largest logit difference, relative to the row's largest logit";
}

// Kept graphs (llama_set_graphs_kept, our patch to llama.cpp): decode ticks and prompt ticks in
// turn, each prompt a fresh one of one length at one id, so that the prompt ticks' second pass
// recurs. Every output row's logits as the plain batches give; and the graphs were replayed: the
// first pass of a prompt tick asks for every row's output (first_entries_output), so it is the
// decode tick's graph, and the prompt's rest finds its own kept graph, where a runtime keeping
// only the last graph builds all three passes of a round anew.
TEST(StreamBatches, KeptGraphsGiveTheSameLogitsAndAreReplayedAcrossShapes) {
  auto kept = open_per_seq(true, 0, 2048, /*pad_entries_per_pass=*/64, /*graphs_kept=*/3);
  auto last_only = open_per_seq(true, 0, 2048, 64, 0);
  auto plain = open_per_seq(false);
  ASSERT_TRUE(kept && last_only && plain);
  ASSERT_TRUE(kept->keeps_pass_graphs());
  ASSERT_FALSE(last_only->keeps_pass_graphs());
  std::int32_t reused[2] = {0, 0};
  const int rounds = 6;
  for (int which = 0; which < 2; ++which) {
    LlamaRuntime& rt = which == 0 ? *kept : *last_only;
    Lockstep run(rt, *plain);
    for (std::int32_t seq : {0, 1, 2, 3}) run.start(seq, tiny_prompt(6 + seq, seq + 10 * which));
    run.step({0, 1, 2, 3});
    run.step({0, 1, 2, 3});
    const std::int32_t before = rt.graphs_reused();
    for (int r = 0; r < rounds; ++r) {
      run.start(4, tiny_prompt(9, 20 + r));  // a fresh prompt at 4, as long as the last
      run.step({0, 1, 2, 3, 4});
      run.step({0, 1, 2, 3, 4});
    }
    reused[which] = rt.graphs_reused() - before;
    EXPECT_EQ(run.rows(), 4 + 4 + rounds * 10);
    EXPECT_LT(run.worst(), 1e-3f) << "largest logit difference, relative to the row's largest logit";
    EXPECT_EQ(rt.kv_tokens(4), 10) << "the prompt's 9 and one decoded";
  }
  // Three passes a round; the kept runtime builds the prompt's rest once and the shared first
  // pass once (the first round), then replays all three.
  EXPECT_GE(reused[0], 3 * rounds - 2);
  EXPECT_LE(reused[1], rounds) << "alternating shapes: only the last graph, rarely the next one's";
}

// The scheduler's id swap for a prompt that starts together with others (Scheduler::
// group_prompt_ids): the blank prompt's sequence ends, the decoding stream holding the slot moves
// into its id, and the prompt starts afresh at the slot, all before one decode. Against a runtime
// where nothing moved (the prompt at its own id), every row's logits agree, then and after.
TEST(StreamBatches, APromptSwappedIntoADecodingStreamsIdGivesTheSameLogits) {
  auto moved = open_per_seq(true, 0, 2048, /*pad_entries_per_pass=*/64);
  auto still = open_per_seq(true, 0, 2048, 64);
  ASSERT_TRUE(moved && still);
  std::map<std::int32_t, std::int32_t> pos;  // by the unmoved runtime's ids
  std::map<std::int32_t, Token> next;
  for (std::int32_t seq : {0, 1, 2}) {
    ASSERT_TRUE(moved->start_sequence(seq, SamplingParams{}).ok());
    ASSERT_TRUE(still->start_sequence(seq, SamplingParams{}).ok());
  }
  float worst = 0.0f;
  int rows = 0;
  // One decode: `pending` by the unmoved ids; `id_of` maps them to the moved runtime's.
  auto step = [&](const std::map<std::int32_t, std::vector<Token>>& pending, const std::map<std::int32_t, std::int32_t>& id_of) {
    std::vector<BatchEntry> a, b;
    std::map<std::int32_t, std::int32_t> row;
    for (const auto& [seq, toks] : pending) {
      for (std::size_t i = 0; i < toks.size(); ++i) {
        const bool out = i + 1 == toks.size();
        b.push_back({toks[i], pos[seq] + static_cast<std::int32_t>(i), seq, out});
        a.push_back({toks[i], pos[seq] + static_cast<std::int32_t>(i), id_of.count(seq) ? id_of.at(seq) : seq, out});
      }
      row[seq] = static_cast<std::int32_t>(b.size()) - 1;
      pos[seq] += static_cast<std::int32_t>(toks.size());
    }
    ASSERT_TRUE(moved->decode(a).ok());
    ASSERT_TRUE(still->decode(b).ok());
    for (const auto& [seq, r] : row) {
      const std::span<const float> la = moved->logits(r), lb = still->logits(r);
      ASSERT_EQ(la.size(), lb.size());
      ASSERT_FALSE(la.empty());
      float scale = 1.0f, diff = 0.0f;
      for (std::size_t k = 0; k < la.size(); ++k) {
        scale = std::max(scale, std::fabs(lb[k]));
        diff = std::max(diff, std::fabs(la[k] - lb[k]));
      }
      worst = std::max(worst, diff / scale);
      next[seq] = argmax_first(lb.data(), static_cast<std::int32_t>(lb.size()));
      ++rows;
    }
  };
  step({{0, tiny_prompt(9, 0)}, {1, tiny_prompt(12, 1)}, {2, tiny_prompt(7, 2)}}, {});
  for (int i = 0; i < 3; ++i) step({{0, {next[0]}}, {1, {next[1]}}, {2, {next[2]}}}, {});
  // Two prompts arrive: the unmoved runtime keeps them at 3 and 4; the moved one swaps the prompt
  // at 4 with the stream at 1 (which goes on at 4), so its prompts sit at 3 and 1.
  for (std::int32_t seq : {3, 4}) {
    ASSERT_TRUE(moved->start_sequence(seq, SamplingParams{}).ok());
    ASSERT_TRUE(still->start_sequence(seq, SamplingParams{}).ok());
  }
  moved->end_sequence(4);
  moved->move_sequence(1, 4);
  ASSERT_TRUE(moved->start_sequence(1, SamplingParams{}).ok());
  const std::map<std::int32_t, std::int32_t> id_of = {{1, 4}, {4, 1}};
  step({{0, {next[0]}}, {1, {next[1]}}, {2, {next[2]}}, {3, tiny_prompt(20, 3)}, {4, tiny_prompt(17, 4)}}, id_of);
  EXPECT_EQ(moved->kv_tokens(4), still->kv_tokens(1)) << "the stream's cells moved with it";
  EXPECT_EQ(moved->kv_tokens(1), 17) << "the prompt's own cells, nothing of the stream's";
  for (int i = 0; i < 4; ++i) step({{0, {next[0]}}, {1, {next[1]}}, {2, {next[2]}}, {3, {next[3]}}, {4, {next[4]}}}, id_of);
  EXPECT_EQ(rows, 3 * 4 + 5 * 5);
  EXPECT_LT(worst, 1e-3f) << "largest logit difference, relative to the row's largest logit";
}

// A sequence far deeper than the rows beside it decodes in a pass of its own (its depth would
// otherwise size every row's attention): the same logits as the plain batches, and it happened.
TEST(StreamBatches, ADeepSequenceInAPassOfItsOwnGivesTheSameLogits) {
  auto arranged = open_per_seq(true, /*deep_pass_row_cells=*/512, /*n_ctx=*/4096);  // 512 cells a sequence
  auto plain = open_per_seq(false, 0, 4096);
  ASSERT_TRUE(arranged && plain);
  Lockstep run(*arranged, *plain);
  run.start(3, tiny_prompt(120, 3));  // the highest id, decoded past 256 deep: padded 512 against the rows' 256
  for (int i = 0; i < 140; ++i) run.step({3});
  for (std::int32_t seq : {0, 1, 2}) run.start(seq, tiny_prompt(6 + seq, seq));
  const std::uint64_t before = arranged->deep_passes_total();
  for (int i = 0; i < 6; ++i) run.step({0, 1, 2, 3});  // 3 rows x 256 extra cells >= 512
  EXPECT_EQ(arranged->deep_passes_total() - before, 6u);
  EXPECT_EQ(plain->deep_passes_total(), 0u);
  EXPECT_EQ(run.rows(), 140 + 6 * 4);
  EXPECT_LT(run.worst(), 1e-3f) << "largest logit difference, relative to the row's largest logit";
}

// A copy between KV streams computes no graph, so llama.cpp keeps its scheduler and last graph
// (our patch 0004; without it the next decode reserves the worst case and builds its graph anew,
// 15-25 ms of host time on a GPU): an idle stream moved while two others decode, and the next
// decode of the same shape runs the last graph again, with the logits of a runtime where nothing
// moved.
TEST(StreamBatches, AMoveBetweenStreamsKeepsTheLastGraph) {
  auto moved = open_per_seq(false);
  auto still = open_per_seq(false);
  ASSERT_TRUE(moved && still);
  Lockstep run(*moved, *still);
  for (std::int32_t seq : {0, 1, 5}) run.start(seq, tiny_prompt(6 + 3 * seq, seq));
  run.step({0, 1, 5});
  for (int i = 0; i < 3; ++i) run.step({0, 1});  // 5 sits idle: a kept prefix
  const std::int32_t kv5 = moved->kv_tokens(5);
  const std::int32_t reused = moved->graphs_reused();
  moved->move_sequence(5, 6);
  run.step({0, 1});
  EXPECT_EQ(moved->graphs_reused(), reused + 1) << "the decode after the move ran the last graph";
  for (int i = 0; i < 2; ++i) run.step({0, 1});
  EXPECT_EQ(moved->graphs_reused(), reused + 3);
  EXPECT_EQ(moved->kv_tokens(6), kv5) << "the stream's cells moved with it";
  EXPECT_EQ(moved->kv_tokens(5), 0);
  EXPECT_EQ(run.rows(), 3 + 6 * 2);
  EXPECT_LT(run.worst(), 1e-3f) << "largest logit difference, relative to the row's largest logit";
}

// Verifying ticks: every sequence's next token and its drafts, each row an output, in one decode
// (uneven where some sequences have no drafts): every row's logits as the plain batches give.
// The arranged batch reorders the rows to the order llama.cpp's passes output them.
TEST(StreamBatches, VerifyingRowsOfEverySequenceGiveTheSameLogits) {
  auto arranged = open_per_seq(true);
  auto plain = open_per_seq(false);
  ASSERT_TRUE(arranged && plain);
  Lockstep run(*arranged, *plain);
  for (std::int32_t seq : {0, 1, 2, 3, 5}) run.start(seq, tiny_prompt(6 + 5 * seq, seq));
  run.step({0, 1, 2, 3, 5}, 3);
  for (int i = 0; i < 3; ++i) run.step({0, 1, 2, 3, 5}, 3);  // 4 rows each, a gap at 4
  run.step({0, 1, 2, 3, 5}, 1);
  for (int i = 0; i < 2; ++i) run.step({0, 1, 2, 3, 5}, i);  // 2 rows each, then 1
  EXPECT_EQ(run.rows(), 5 + 3 * 5 * 4 + 5 * 4 + 5 * 2 + 5 * 1);
  EXPECT_LT(run.worst(), 1e-3f) << "largest logit difference, relative to the row's largest logit";
}

}  // namespace
}  // namespace uma::test
