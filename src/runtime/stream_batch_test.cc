// arrange_for_streams against a model of llama.cpp's per-stream split (llama-batch.cpp,
// `split_equal(n_ubatch, sequential=true)`): how many passes a batch takes, and whether its
// outputs come out in batch order (if not, llama.cpp swaps whole output rows on the host).
#include "runtime/stream_batch.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

namespace uma {
namespace {

// llama.cpp's split, as read in the pinned source: a pass is the chain of consecutive sequence ids
// met scanning the unused entries in batch order, and takes as many entries from each sequence as
// the shortest has left (n_ubatch large enough here not to matter).
std::vector<std::vector<std::int32_t>> model_passes(const std::vector<BatchEntry>& b) {
  std::vector<bool> used(b.size(), false);
  std::map<std::int32_t, std::vector<std::int32_t>> of_seq;
  for (std::size_t i = 0; i < b.size(); ++i) of_seq[b[i].seq].push_back(static_cast<std::int32_t>(i));
  std::vector<std::vector<std::int32_t>> passes;
  for (;;) {
    std::vector<std::int32_t> chain;
    for (std::size_t i = 0; i < b.size(); ++i) {
      if (used[i]) continue;
      if (chain.empty() || b[i].seq == chain.back() + 1) chain.push_back(b[i].seq);
    }
    if (chain.empty()) return passes;
    std::map<std::int32_t, std::vector<std::int32_t>> left;
    std::size_t take = SIZE_MAX;
    for (std::int32_t s : chain) {
      for (std::int32_t i : of_seq[s]) {
        if (!used[static_cast<std::size_t>(i)]) left[s].push_back(i);
      }
      take = std::min(take, left[s].size());
    }
    std::vector<std::int32_t> pass;
    for (std::int32_t s : chain) {
      for (std::size_t k = 0; k < take; ++k) {
        pass.push_back(left[s][k]);
        used[static_cast<std::size_t>(left[s][k])] = true;
      }
    }
    passes.push_back(std::move(pass));
  }
}

bool outputs_in_batch_order(const std::vector<BatchEntry>& b) {
  std::int32_t last = -1;
  for (const auto& pass : model_passes(b)) {
    for (std::int32_t i : pass) {
      if (!b[static_cast<std::size_t>(i)].logits) continue;
      if (i < last) return false;
      last = i;
    }
  }
  return true;
}

// The scheduler's batch: sequences in id order, each one's entries together.
std::vector<BatchEntry> batch_of(const std::vector<std::pair<std::int32_t, std::int32_t>>& seq_and_length) {
  std::vector<BatchEntry> b;
  for (const auto& [seq, n] : seq_and_length) {
    for (std::int32_t k = 0; k < n; ++k) b.push_back({100 + seq, 10 + k, seq, k == n - 1});
  }
  return b;
}

StreamBatchOptions fill_all() {
  StreamBatchOptions o;
  o.filler_pos = [](std::int32_t seq) { return 1000 + seq; };
  o.filler_token = 7;
  return o;
}

void expect_same_entries(std::span<const BatchEntry> in, const StreamBatch& out) {
  ASSERT_EQ(out.index_of.size(), in.size());
  std::set<std::int32_t> targets;
  for (std::size_t i = 0; i < in.size(); ++i) {
    const BatchEntry& e = out.entries[static_cast<std::size_t>(out.index_of[i])];
    EXPECT_EQ(e.token, in[i].token);
    EXPECT_EQ(e.pos, in[i].pos);
    EXPECT_EQ(e.seq, in[i].seq);
    EXPECT_EQ(e.logits, in[i].logits);
    targets.insert(out.index_of[i]);
  }
  EXPECT_EQ(targets.size(), in.size());
  EXPECT_EQ(out.entries.size(), in.size() + out.fillers.size() + static_cast<std::size_t>(out.pad_entries));
  // Each sequence's positions still rise in batch order (llama.cpp rejects a batch otherwise).
  std::map<std::int32_t, std::int32_t> last_pos;
  for (const BatchEntry& e : out.entries) {
    auto [it, fresh] = last_pos.try_emplace(e.seq, e.pos);
    if (!fresh) {
      EXPECT_GT(e.pos, it->second) << "sequence " << e.seq;
      it->second = e.pos;
    }
  }
}

TEST(StreamBatch, APromptAmongDecodeRowsNoLongerReordersTheOutputs) {
  const auto in = batch_of({{0, 1}, {1, 1}, {2, 5}, {3, 1}, {4, 1}});
  ASSERT_FALSE(outputs_in_batch_order(in)) << "the model of llama.cpp's split must see the problem";
  ASSERT_EQ(model_passes(in).size(), 2u);
  StreamBatch out;
  arrange_for_streams(in, fill_all(), out);
  expect_same_entries(in, out);
  EXPECT_TRUE(out.fillers.empty());
  EXPECT_TRUE(outputs_in_batch_order(out.entries));
  EXPECT_EQ(model_passes(out.entries).size(), 2u) << "the decode rows and every first token, then the prompt's rest";
}

TEST(StreamBatch, AGapBetweenDecodeRowsIsFilledSoTheyStayOnePass) {
  const auto in = batch_of({{0, 1}, {1, 1}, {4, 1}, {5, 1}});
  ASSERT_EQ(model_passes(in).size(), 2u);
  StreamBatch out;
  arrange_for_streams(in, fill_all(), out);
  expect_same_entries(in, out);
  ASSERT_EQ(out.fillers.size(), 2u);
  EXPECT_EQ(out.fillers[0].seq, 2);
  EXPECT_EQ(out.fillers[0].pos, 1002);
  EXPECT_EQ(out.fillers[1].seq, 3);
  for (const BatchEntry& e : out.entries) {
    if (e.seq == 2 || e.seq == 3) {
      EXPECT_FALSE(e.logits) << "a filler asks for no output";
      EXPECT_EQ(e.token, 7);
    }
  }
  EXPECT_EQ(model_passes(out.entries).size(), 1u);
  EXPECT_TRUE(outputs_in_batch_order(out.entries));
}

TEST(StreamBatch, PromptsAndGapsTogether) {
  // Scattered arrivals: prompts at 1 and 6, decode rows elsewhere, ids 3 and 8 free.
  const auto in = batch_of({{0, 1}, {1, 9}, {2, 1}, {4, 1}, {5, 1}, {6, 4}, {7, 1}, {9, 1}});
  StreamBatch out;
  arrange_for_streams(in, fill_all(), out);
  expect_same_entries(in, out);
  EXPECT_EQ(out.fillers.size(), 2u);
  EXPECT_TRUE(outputs_in_batch_order(out.entries));
  // One pass for every decode row and first token, then the rest of each prompt (two ids apart:
  // a pass each).
  EXPECT_EQ(model_passes(out.entries).size(), 3u);
  EXPECT_GT(model_passes(in).size(), 3u);
}

StreamBatchOptions pad_prompts() {
  StreamBatchOptions o = fill_all();
  o.pad_entries_per_pass = 64;
  o.max_batch = 2048;
  o.seq_cells = 4096;
  o.n_ubatch = 512;
  return o;
}

// Three prompts of unequal length arriving at consecutive ids beside decode rows: the shorter
// rests are padded to the longest, so the three share one pass after the decode rows' pass.
TEST(StreamBatch, PromptsAtConsecutiveIdsArePaddedToShareAPass) {
  std::vector<std::pair<std::int32_t, std::int32_t>> seqs;
  for (std::int32_t q = 0; q < 16; ++q) seqs.emplace_back(q, 1);
  seqs[5].second = 128;
  seqs[6].second = 126;
  seqs[7].second = 131;
  const auto in = batch_of(seqs);
  StreamBatch plain;
  arrange_for_streams(in, fill_all(), plain);
  EXPECT_EQ(model_passes(plain.entries).size(), 4u) << "without padding: a pass for each prompt's rest";
  StreamBatch out;
  arrange_for_streams(in, pad_prompts(), out);
  expect_same_entries(in, out);
  EXPECT_EQ(out.pad_entries, 3 + 5);
  EXPECT_EQ(model_passes(out.entries).size(), 2u);
  EXPECT_EQ(llama_passes(out.entries, 512).size(), 2u);
  EXPECT_TRUE(outputs_in_batch_order(out.entries));
  // Each pad: after its chunk's last position, no output; removed from its first position on.
  ASSERT_EQ(out.pads.size(), 2u);
  EXPECT_EQ(out.pads[0].seq, 5);
  EXPECT_EQ(out.pads[0].pos, 10 + 128);
  EXPECT_EQ(out.pads[1].seq, 6);
  EXPECT_EQ(out.pads[1].pos, 10 + 126);
  std::int32_t pads_seen = 0;
  for (const BatchEntry& e : out.entries) {
    if (e.seq == 6 && e.pos >= 10 + 126) {
      EXPECT_FALSE(e.logits);
      EXPECT_LT(e.pos, 10 + 131);
      ++pads_seen;
    }
  }
  EXPECT_EQ(pads_seen, 5);
}

TEST(StreamBatch, PaddingStaysWithinItsBoundsOrIsNotDone) {
  const auto in = batch_of({{0, 1}, {1, 40}, {2, 200}, {3, 1}});
  StreamBatch out;
  arrange_for_streams(in, pad_prompts(), out);  // 160 entries to save one pass: more than it is worth
  expect_same_entries(in, out);
  EXPECT_EQ(out.pad_entries, 0);
  EXPECT_EQ(model_passes(out.entries).size(), 3u);
  StreamBatchOptions o = pad_prompts();
  o.pad_entries_per_pass = 200;
  arrange_for_streams(in, o, out);
  EXPECT_EQ(out.pad_entries, 160);
  EXPECT_EQ(model_passes(out.entries).size(), 2u);
  auto deep = in;  // sequence 1 deep in its stream: its padding would reach past its cells
  for (BatchEntry& e : deep) e.pos += e.seq == 1 ? 3900 : 0;
  arrange_for_streams(deep, o, out);
  expect_same_entries(deep, out);
  EXPECT_EQ(out.pad_entries, 0);
  o.max_batch = static_cast<std::int32_t>(in.size()) + 159;  // no room in the batch
  arrange_for_streams(in, o, out);
  EXPECT_EQ(out.pad_entries, 0);
  o.max_batch = 2048;
  o.filler_pos = nullptr;  // a model whose KV a filler would alter
  arrange_for_streams(in, o, out);
  EXPECT_EQ(out.pad_entries, 0);
  // Prompts two ids apart never share a pass: nothing is padded.
  const auto apart = batch_of({{0, 1}, {1, 40}, {2, 1}, {3, 50}});
  arrange_for_streams(apart, pad_prompts(), out);
  expect_same_entries(apart, out);
  EXPECT_EQ(out.pad_entries, 0);
}

// With first_entries_output, a prompt tick's first pass has the outputs of a decode tick over the
// same ids (llama.cpp then reuses its graph): every first entry and filler asks for one, the
// caller's own outputs stay, and no sequence gets more than two (its first entry and its last).
TEST(StreamBatch, FirstEntriesOutputGivesAPromptTicksFirstPassADecodeTicksOutputs) {
  StreamBatchOptions o = pad_prompts();
  o.first_entries_output = true;
  const auto first_pass = [&](const std::vector<BatchEntry>& in, StreamBatch& out) {
    arrange_for_streams(in, o, out);
    std::vector<std::pair<std::int32_t, bool>> rows;
    const auto passes = model_passes(out.entries);
    for (std::int32_t i : passes.front()) {
      rows.emplace_back(out.entries[static_cast<std::size_t>(i)].seq, out.entries[static_cast<std::size_t>(i)].logits);
    }
    return rows;
  };
  const auto decode_tick = batch_of({{0, 1}, {1, 1}, {2, 1}, {3, 1}, {5, 1}});
  const auto prompt_tick = batch_of({{0, 1}, {1, 6}, {2, 1}, {3, 1}, {5, 3}});
  StreamBatch d, p;
  const auto d_rows = first_pass(decode_tick, d);
  const auto p_rows = first_pass(prompt_tick, p);
  ASSERT_EQ(d_rows.size(), 6u) << "ids 0 to 5, the gap at 4 filled";
  EXPECT_EQ(p_rows, d_rows);
  for (const auto& [seq, out] : p_rows) EXPECT_TRUE(out) << seq;
  std::map<std::int32_t, int> outputs;
  for (std::size_t i = 0; i < prompt_tick.size(); ++i) {
    const BatchEntry& e = p.entries[static_cast<std::size_t>(p.index_of[i])];
    EXPECT_TRUE(e.logits || !prompt_tick[i].logits) << "an output the caller asked for is kept";
  }
  for (const BatchEntry& e : p.entries) outputs[e.seq] += e.logits ? 1 : 0;
  EXPECT_EQ(outputs[1], 2);
  EXPECT_EQ(outputs[5], 2);
  EXPECT_EQ(outputs[4], 1) << "the filler";
  // Off, the prompts' first entries ask for none (the caller's flags, as before).
  o.first_entries_output = false;
  EXPECT_NE(first_pass(prompt_tick, p), d_rows);
}

TEST(StreamBatch, AGapIsFilledWholeOrNotAtAll) {
  const auto in = batch_of({{0, 1}, {4, 1}});
  StreamBatchOptions o = fill_all();
  o.filler_pos = [](std::int32_t seq) { return seq == 2 ? -1 : 50; };  // no room in stream 2
  StreamBatch out;
  arrange_for_streams(in, o, out);
  expect_same_entries(in, out);
  EXPECT_TRUE(out.fillers.empty());
  EXPECT_EQ(model_passes(out.entries).size(), 2u);
}

TEST(StreamBatch, LongGapsAndAFullBatchAreLeftAlone) {
  const auto in = batch_of({{0, 1}, {10, 1}, {12, 1}});
  StreamBatchOptions o = fill_all();
  o.max_filler_run = 4;
  StreamBatch out;
  arrange_for_streams(in, o, out);
  expect_same_entries(in, out);
  ASSERT_EQ(out.fillers.size(), 1u) << "9 missing ids is over the run limit; 1 is not";
  EXPECT_EQ(out.fillers[0].seq, 11);

  o.max_filler_run = 32;
  o.max_entries = 4;  // room for one more entry only
  arrange_for_streams(in, o, out);
  expect_same_entries(in, out);
  ASSERT_EQ(out.fillers.size(), 1u);
  EXPECT_EQ(out.fillers[0].seq, 11);
  EXPECT_LE(out.entries.size(), 4u);
}

TEST(StreamBatch, NoFillerFunctionMeansOnlyTheOrderChanges) {
  const auto in = batch_of({{2, 1}, {0, 3}});
  StreamBatch out;
  arrange_for_streams(in, StreamBatchOptions{}, out);
  expect_same_entries(in, out);
  EXPECT_TRUE(out.fillers.empty());
  // The gap at id 1 ends the chain: sequence 0's pass, then 2's, in the order they come out.
  EXPECT_EQ(out.entries[0].seq, 0);
  EXPECT_EQ(out.entries[2].seq, 0);
  EXPECT_EQ(out.entries[3].seq, 2);
  EXPECT_TRUE(outputs_in_batch_order(out.entries));
}

// A verifying tick: every sequence's decode row and its drafts, each row an output.
std::vector<BatchEntry> verifying(const std::vector<std::pair<std::int32_t, std::int32_t>>& seq_and_rows) {
  std::vector<BatchEntry> b = batch_of(seq_and_rows);
  for (BatchEntry& e : b) e.logits = true;
  return b;
}

TEST(StreamBatch, AVerifyingTicksRowsComeOutInBatchOrder) {
  std::vector<std::pair<std::int32_t, std::int32_t>> uniform;
  for (std::int32_t s = 0; s < 16; ++s) uniform.emplace_back(s, 5);
  using Shape = std::vector<std::pair<std::int32_t, std::int32_t>>;
  for (const Shape& shape : std::vector<Shape>{uniform, {{0, 5}, {1, 3}, {2, 5}, {3, 1}}, {{0, 4}, {2, 4}, {3, 2}}}) {
    const auto in = verifying(shape);
    for (const StreamBatchOptions& o : {fill_all(), StreamBatchOptions{}}) {
      StreamBatch out;
      arrange_for_streams(in, o, out);
      expect_same_entries(in, out);
      EXPECT_TRUE(outputs_in_batch_order(out.entries)) << shape.size() << " sequences";
      // Without fillers no more passes than the scheduler's order (a one-entry filler caps a pass
      // at one row a sequence: where rows are uneven it can cost passes).
      if (!o.filler_pos) {
        EXPECT_LE(model_passes(out.entries).size(), model_passes(in).size());
      }
    }
  }
  const auto in = verifying(uniform);
  StreamBatch out;
  arrange_for_streams(in, fill_all(), out);
  EXPECT_EQ(model_passes(out.entries).size(), 1u);
}

TEST(StreamBatch, ThePassesAreLlamaCppsAlsoWhereAPassReachesNUbatch) {
  // Against the model above, where n_ubatch does not bind; then 16 sequences of 5 rows in passes
  // of at most 32 entries: 2 rows of each a pass (2 x 16 = 32), then 2, then 1.
  for (const auto& in : {verifying({{0, 5}, {1, 3}, {2, 5}, {3, 1}}), batch_of({{0, 1}, {1, 9}, {2, 1}, {4, 1}, {6, 4}})}) {
    std::vector<std::vector<std::int32_t>> mine = llama_passes(std::span<const BatchEntry>(in), 0);
    EXPECT_EQ(mine, model_passes(in));
  }
  std::vector<std::pair<std::int32_t, std::int32_t>> uniform;
  for (std::int32_t s = 0; s < 16; ++s) uniform.emplace_back(s, 5);
  const auto in = verifying(uniform);
  std::vector<std::size_t> sizes;
  for (const auto& p : uma::llama_passes(std::span<const BatchEntry>(in), 32)) sizes.push_back(p.size());
  EXPECT_EQ(sizes, (std::vector<std::size_t>{32, 32, 16}));
  StreamBatchOptions o = fill_all();
  o.n_ubatch = 32;
  StreamBatch out;
  arrange_for_streams(in, o, out);
  EXPECT_EQ(uma::llama_passes(std::span<const BatchEntry>(out.entries), 32).size(), 3u);
  std::int32_t last = -1;  // outputs in batch order under the bounded passes too
  for (const auto& p : uma::llama_passes(std::span<const BatchEntry>(out.entries), 32)) {
    for (std::int32_t i : p) {
      EXPECT_GT(i, last);
      last = i;
    }
  }
}

// Decode rows of sequences 0..3 at these positions (their depth).
std::vector<BatchEntry> rows_at(const std::vector<std::int32_t>& pos) {
  std::vector<BatchEntry> b;
  for (std::size_t s = 0; s < pos.size(); ++s) b.push_back({1, pos[s], static_cast<std::int32_t>(s), true});
  return b;
}

std::vector<std::int32_t> pass_sizes(const StreamBatch& out) {
  std::vector<std::int32_t> n;
  for (const auto& p : model_passes(out.entries)) n.push_back(static_cast<std::int32_t>(p.size()));
  return n;
}

TEST(StreamBatch, ADeepSequenceAtEitherEndOfTheIdsGetsAPassOfItsOwn) {
  StreamBatchOptions o;
  o.deep_pass_row_cells = 2048;
  StreamBatch out;
  // Highest id deep: 3 rows x (2048 - 256) extra cells = 5376 >= 2048: it goes first, alone.
  const std::vector<BatchEntry> high = rows_at({100, 120, 90, 2000});
  arrange_for_streams(high, o, out);
  expect_same_entries(high, out);
  EXPECT_EQ(out.entries.front().seq, 3);
  EXPECT_EQ(pass_sizes(out), (std::vector<std::int32_t>{1, 3}));
  EXPECT_TRUE(outputs_in_batch_order(out.entries));
  // Lowest id deep, as a prompt chunk: it goes last, whole, after the rows' pass.
  std::vector<BatchEntry> low;
  for (std::int32_t k = 0; k < 40; ++k) low.push_back({1, 1800 + k, 0, k == 39});
  for (const BatchEntry& e : rows_at({0, 100, 120, 90})) {
    if (e.seq > 0) low.push_back(e);
  }
  arrange_for_streams(low, o, out);
  expect_same_entries(low, out);
  EXPECT_EQ(out.entries.back().seq, 0);
  EXPECT_EQ(pass_sizes(out), (std::vector<std::int32_t>{3, 40}));
  EXPECT_TRUE(outputs_in_batch_order(out.entries));
  // Without the option the deep sequence shares the rows' pass (and its depth).
  arrange_for_streams(high, StreamBatchOptions{}, out);
  EXPECT_EQ(pass_sizes(out), (std::vector<std::int32_t>{4}));
}

TEST(StreamBatch, ADeepSequenceStaysInThePassWhenItWouldCutTheChainOrCostsLittle) {
  StreamBatchOptions o;
  o.deep_pass_row_cells = 2048;
  StreamBatch out;
  // In the middle of the ids: taking it out would cut the chain in two.
  arrange_for_streams(rows_at({100, 2000, 120, 90}), o, out);
  EXPECT_EQ(pass_sizes(out), (std::vector<std::int32_t>{4}));
  // 1 other row x 768 extra cells < 2048: a pass of its own would cost more.
  arrange_for_streams(rows_at({100, 1000}), o, out);
  EXPECT_EQ(pass_sizes(out), (std::vector<std::int32_t>{2}));
  // Depths within one padding step: nothing is deeper.
  arrange_for_streams(rows_at({10, 200, 250, 100}), o, out);
  EXPECT_EQ(pass_sizes(out), (std::vector<std::int32_t>{4}));
}

}  // namespace
}  // namespace uma
