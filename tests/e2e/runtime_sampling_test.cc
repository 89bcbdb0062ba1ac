// Backend (on-device) sampling against the host's: two LlamaRuntimes on one random model, one
// with greedy sampled inside the decode's graph (RuntimeConfig::backend_sampling on), one on the
// host, fed the same batches (so the same logits: llama.cpp is deterministic for a fixed batch).
// Every greedy token must be the same; a seeded non-greedy request (its device sampler detached, a
// CPU chain on its logits row) must draw the same tokens; a device-sampled row never reaches the
// host; moving, parking and reusing sequence ids of either kind keeps all of that true.
#include <gtest/gtest.h>

#include <map>

#include "e2e/tiny_runtime.h"
#include "runtime/llama_runtime.h"

namespace uma::test {
namespace {

std::unique_ptr<LlamaRuntime> open_tiny(const std::string& kv_layout, const std::string& backend_sampling) {
  auto rt = open_tiny_runtime([&](RuntimeConfig& cfg) {
    cfg.n_ctx = 1024;
    EXPECT_TRUE(parse_enum(kKvLayoutNames, kv_layout, &cfg.kv_layout));
    EXPECT_TRUE(parse_enum(kDeviceSamplingNames, backend_sampling, &cfg.backend_sampling));
  });
  if (rt) {
    EXPECT_EQ(rt->backend_sampling(), backend_sampling == "on");
  }
  return rt;
}

// Drives one runtime as the scheduler does: each step one batch in sequence-id order of every
// live sequence's next input (a whole prompt, or its last sampled token), then a sample per row.
class Driver {
 public:
  explicit Driver(LlamaRuntime& rt) : rt_(rt) {}
  void start(std::int32_t seq, const SamplingParams& p, std::vector<Token> prompt) {
    ASSERT_TRUE(rt_.start_sequence(seq, p).ok());
    live_[seq] = {std::move(prompt), 0, {}};
  }
  void end(std::int32_t seq) {
    rt_.end_sequence(seq);
    live_.erase(seq);
  }
  void move(std::int32_t from, std::int32_t to) {
    rt_.move_sequence(from, to);
    live_[to] = std::move(live_[from]);
    live_.erase(from);
  }
  void park(std::int32_t seq, ParkedSequence& into) {
    ASSERT_TRUE(rt_.park_sequence(seq, /*save_kv=*/true, into).ok());
    parked_[seq] = std::move(live_[seq]);
    live_.erase(seq);
  }
  void unpark(std::int32_t parked_as, std::int32_t seq, ParkedSequence& from) {
    ASSERT_TRUE(rt_.unpark_sequence(seq, from).ok());
    live_[seq] = std::move(parked_[parked_as]);
    parked_.erase(parked_as);
  }
  // One decode + a sample for every live sequence; returns how many rows came to the host.
  int step() {
    std::vector<BatchEntry> batch;
    std::map<std::int32_t, std::int32_t> row_of;
    for (auto& [seq, s] : live_) {
      for (std::size_t i = 0; i < s.pending.size(); ++i) {
        batch.push_back({s.pending[i], s.pos++, seq, i + 1 == s.pending.size()});
      }
      row_of[seq] = static_cast<std::int32_t>(batch.size()) - 1;
      s.pending.clear();
    }
    EXPECT_TRUE(rt_.decode(batch).ok());
    int host_rows = 0;
    for (auto& [seq, s] : live_) {
      if (!rt_.logits(row_of[seq]).empty()) ++host_rows;
      const Token t = rt_.sample(seq, row_of[seq]);
      s.out.push_back(t);
      s.pending = {t};
    }
    return host_rows;
  }
  const std::vector<Token>& out(std::int32_t seq) { return live_[seq].out; }
  LlamaRuntime& rt() { return rt_; }

 private:
  struct Live {
    std::vector<Token> pending;
    std::int32_t pos;
    std::vector<Token> out;
  };
  LlamaRuntime& rt_;
  std::map<std::int32_t, Live> live_, parked_;
};

class BackendSampling : public ::testing::TestWithParam<std::string> {};

TEST_P(BackendSampling, GreedyAndSeededTokensMatchTheHostsThroughSwitchesMovesAndParking) {
  auto dev = open_tiny(GetParam(), "on");
  auto host = open_tiny(GetParam(), "off");
  ASSERT_TRUE(dev && host);
  Driver d(*dev), h(*host);
  SamplingParams greedy;
  SamplingParams seeded;
  seeded.temperature = 0.9f;
  seeded.top_k = 40;
  seeded.seed = 1234;
  const auto both = [&](auto&& f) { f(d); f(h); };

  // Two greedy streams and one seeded, prompts of different lengths in one batch.
  both([&](Driver& x) {
    x.start(0, greedy, tiny_prompt(17, 1));
    x.start(1, seeded, tiny_prompt(40, 2));
    x.start(2, greedy, tiny_prompt(5, 3));
  });
  for (int i = 0; i < 12; ++i) {
    // Only the seeded stream's row comes to the host when sampling on the device.
    EXPECT_EQ(d.step(), 1);
    EXPECT_EQ(h.step(), 3);
  }
  for (std::int32_t seq : {0, 1, 2}) EXPECT_EQ(d.out(seq), h.out(seq)) << "sequence " << seq;
  const std::uint64_t switches = dev->sampler_switches();
  EXPECT_EQ(switches, 1u);  // id 1 detached for the seeded request; the greedy ids kept theirs

  // The seeded stream ends; a greedy request takes its id (re-attached), a seeded one takes id 3.
  both([&](Driver& x) {
    x.end(1);
    x.start(1, greedy, tiny_prompt(9, 4));
    x.start(3, seeded, tiny_prompt(3, 5));
  });
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(d.step(), 1);
    h.step();
  }
  EXPECT_EQ(dev->sampler_switches(), switches + 2);
  // A greedy stream moves onto the seeded one's old id and back (what keeps per-sequence KV dense).
  both([&](Driver& x) {
    x.end(3);
    x.move(2, 3);
  });
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(d.step(), 0);
    h.step();
  }
  both([&](Driver& x) { x.move(3, 2); });
  // Parked with its KV and resumed under another id, a greedy stream carries on alike.
  ParkedSequence pd, ph;
  d.park(0, pd);
  h.park(0, ph);
  for (int i = 0; i < 3; ++i) {
    d.step();
    h.step();
  }
  d.unpark(0, 3, pd);  // id 3 last held the seeded request, then a greedy one moved through it
  h.unpark(0, 3, ph);
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(d.step(), 0);
    h.step();
  }
  for (std::int32_t seq : {1, 2, 3}) EXPECT_EQ(d.out(seq), h.out(seq)) << "sequence " << seq;
  EXPECT_GT(d.out(2).size(), 20u);
  EXPECT_GT(d.out(3).size(), 20u);  // the first greedy stream, resumed under id 3

}

// A greedy request that ignores end tokens is picked on the device too, its ends masked per row:
// on the oracle model (after token t the argmax is t + 1) a prompt ending one before an end token
// makes plain greedy pick that end, and ignore_eos the best other token, as the host's chain does.
// Which rows are masked is a value set at each decode, so requests of both kinds take the same
// ids in turn with no sampler detached and a reused graph picking up the change.
TEST_P(BackendSampling, IgnoringEndsIsPickedOnTheDeviceWithNoSwitchAndMaskedPerRow) {
  const auto open_oracle = [&](const std::string& backend_sampling) {
    return open_tiny_runtime([&](RuntimeConfig& cfg) {
      cfg.model_path = std::string(UMA_MODELS_DIR) + "/oracle.gguf";
      cfg.n_ctx = 1024;
      EXPECT_TRUE(parse_enum(kKvLayoutNames, std::string_view(GetParam()), &cfg.kv_layout));
      EXPECT_TRUE(parse_enum(kDeviceSamplingNames, backend_sampling, &cfg.backend_sampling));
    });
  };
  auto dev = open_oracle("on");
  auto host = open_oracle("off");
  ASSERT_TRUE(dev && host);
  ASSERT_TRUE(dev->backend_sampling());
  Token end = -1;
  for (Token t = 1; t < 1000 && end < 0; ++t) {
    if (dev->is_end_of_generation(t)) end = t;
  }
  ASSERT_GT(end, 0);
  Driver d(*dev), h(*host);
  SamplingParams greedy;
  SamplingParams ignoring;
  ignoring.ignore_eos = true;
  const auto both = [&](auto&& f) { f(d); f(h); };
  const std::uint64_t switches = dev->sampler_switches();

  both([&](Driver& x) {
    x.start(0, ignoring, {700, 701, end - 1});
    x.start(1, greedy, {800, end - 1});
    x.start(2, ignoring, {900, 901});
  });
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(d.step(), 0);  // every row picked on the device
    h.step();
  }
  for (std::int32_t seq : {0, 1, 2}) EXPECT_EQ(d.out(seq), h.out(seq)) << "sequence " << seq;
  EXPECT_EQ(d.out(1).front(), end);  // plain greedy: the end token, its row not masked
  EXPECT_NE(d.out(0).front(), end);  // ignoring ends: the next best
  EXPECT_EQ(d.out(2).front(), 902);
  for (std::int32_t seq : {0, 2}) {
    for (Token t : d.out(seq)) EXPECT_FALSE(dev->is_end_of_generation(t)) << "sequence " << seq;
  }

  // The kinds trade ids with one-token prompts: the batch keeps its shape, so llama.cpp may reuse
  // its graph, and only the rows' mask amounts change.
  both([&](Driver& x) {
    x.end(0);
    x.end(1);
    x.start(0, greedy, {end - 1});
    x.start(1, ignoring, {end - 1});
  });
  const std::int32_t reused = dev->graphs_reused();
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(d.step(), 0);
    h.step();
    // The first step after the trade already ran the last graph again (the flags are inputs).
    if (i == 0) {
      EXPECT_EQ(dev->graphs_reused(), reused + 1);
    }
  }
  for (std::int32_t seq : {0, 1, 2}) EXPECT_EQ(d.out(seq), h.out(seq)) << "sequence " << seq;
  EXPECT_EQ(d.out(0).front(), end);
  EXPECT_NE(d.out(1).front(), end);

  // Idle ids whose last requests ignored ends (their flags left as they were) are given row 0,
  // before and after its owner, a greedy stream: that row is not masked.
  both([&](Driver& x) {
    x.end(0);
    x.end(1);
    x.end(2);
    x.start(0, ignoring, {600, end - 1});
    x.start(3, ignoring, {650, end - 1});
  });
  for (int i = 0; i < 2; ++i) {
    d.step();
    h.step();
  }
  both([&](Driver& x) {
    x.end(0);
    x.end(3);
    x.start(1, greedy, {end - 1});  // row 0; ids 0 and 3 idle, both last ignoring ends
    x.start(2, ignoring, {end - 1});
  });
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(d.step(), 0);
    h.step();
  }
  for (std::int32_t seq : {1, 2}) EXPECT_EQ(d.out(seq), h.out(seq)) << "sequence " << seq;
  EXPECT_EQ(d.out(1).front(), end);
  EXPECT_NE(d.out(2).front(), end);
  EXPECT_EQ(dev->sampler_switches(), switches);  // no id was detached
}

// Verifying ticks' logits rows are reserved at open where the output buffer is page-locked (a
// GPU), by a throwaway decode that leaves no cell behind; a CPU's grows as llama.cpp's does.
TEST_P(BackendSampling, AGpuReservesTheVerifyingRowsAtOpenAndKeepsNoCellOfThem) {
  auto rt = open_tiny_runtime([&](RuntimeConfig& cfg) {
    cfg.n_ctx = 1024;
    EXPECT_TRUE(parse_enum(kKvLayoutNames, std::string_view(GetParam()), &cfg.kv_layout));
    cfg.outputs_per_seq = 5;
    cfg.verify_outputs = 18;
  });
  ASSERT_TRUE(rt != nullptr);
  EXPECT_EQ(rt->outputs_reserved(), rt->on_gpu() ? 18 : 0);
  for (std::int32_t seq = 0; seq < rt->n_seq_max(); ++seq) EXPECT_EQ(rt->kv_tokens(seq), 0) << "sequence " << seq;
  // And a request after it starts at position 0, decoding as on any fresh runtime.
  Driver d(*rt);
  d.start(0, SamplingParams{}, tiny_prompt(8, 1));
  for (int i = 0; i < 4; ++i) d.step();
  EXPECT_EQ(d.out(0).size(), 4u);
  EXPECT_EQ(rt->kv_tokens(0), 11);
}

INSTANTIATE_TEST_SUITE_P(Layouts, BackendSampling, ::testing::Values("unified", "per-seq"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param == "unified" ? std::string("Unified") : std::string("PerSeq");
                         });

}  // namespace
}  // namespace uma::test
