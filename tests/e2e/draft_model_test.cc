// runtime/draft_model.h against itself: a lone job's catch-up fed one token a decode (what a GPU
// gets, for its CUDA graphs) proposes exactly what the catch-up in one batch does, over ticks that
// accept all, some or none of the drafts against the oracle's rule (greedy next = last + 1).
#include <gtest/gtest.h>

#include <llama.h>

#include <string>
#include <vector>

#include "runtime/draft_model.h"
#include "runtime/llama_runtime.h"
#include "runtime/vocab_model.h"

namespace uma::test {
namespace {

struct OracleVocab {
  llama_model* model = nullptr;
  OracleVocab() {
    init_llama_backend();
    llama_model_params mp = llama_model_default_params();
    mp.vocab_only = true;
    model = llama_model_load_from_file((std::string(UMA_MODELS_DIR) + "/oracle.gguf").c_str(), mp);
  }
  ~OracleVocab() { llama_model_free(model); }
};

std::unique_ptr<DraftModel> open_oracle_draft(const llama_vocab* target, const std::string& name, bool one_token) {
  DraftConfig c;
  c.model_path = std::string(UMA_MODELS_DIR) + "/" + name;
  c.n_ctx = 1024;
  c.n_seq_max = 2;
  c.n_batch = 64;
  c.n_threads = 1;
  c.n_gpu_layers = 0;
  c.one_token_catch_up = one_token;
  Status st;
  auto d = DraftModel::open(c, target, &st);
  EXPECT_TRUE(d != nullptr) << st.to_string();
  return d;
}

struct DraftTicks {
  std::size_t full_accepts = 0;   // ticks that accepted every draft: two tokens to catch up
  std::size_t extra_tokens = 0;   // catch-up tokens beyond each call's one, where one by one
};

// Ticks of one sequence: k cycles 1..4; the tick accepts drafts while they follow the oracle's
// rule and appends the oracle's next token. Both drafters must propose the same tokens each tick.
DraftTicks tick_drafters(DraftModel& batched, DraftModel& one_by_one, std::vector<Token> seq, int ticks) {
  DraftTicks run;
  for (int t = 0; t < ticks; ++t) {
    const std::int32_t k = 1 + t % 4;
    std::vector<Token> a, b;
    const std::size_t lag = one_by_one.lag(0, seq);
    EXPECT_EQ(lag, batched.lag(0, seq));
    if (t > 0 && lag <= static_cast<std::size_t>(k) + 1) run.extra_tokens += lag - 1;  // else batched in both
    const DraftJob ja{0, seq, k, &a}, jb{0, seq, k, &b};
    EXPECT_TRUE(batched.draft({&ja, 1}).ok());
    EXPECT_TRUE(one_by_one.draft({&jb, 1}).ok());
    EXPECT_EQ(a, b) << "tick " << t;
    std::size_t accepted = 0;
    while (accepted < a.size() && a[accepted] == seq.back() + 1) seq.push_back(a[accepted++]);
    if (accepted == static_cast<std::size_t>(k)) ++run.full_accepts;
    seq.push_back(seq.back() + 1);
  }
  return run;
}

TEST(DraftModel, ACatchUpFedOneTokenADecodeProposesWhatOneBatchDoes) {
  OracleVocab target;
  ASSERT_NE(target.model, nullptr);
  for (const char* name : {"oracle-draft-50.gguf", "oracle-draft-100.gguf"}) {
    SCOPED_TRACE(name);
    auto batched = open_oracle_draft(model_vocab(target.model), name, false);
    auto one_by_one = open_oracle_draft(model_vocab(target.model), name, true);
    ASSERT_TRUE(batched && one_by_one);
    std::vector<Token> prompt;
    for (Token t = 2000; t < 2040; ++t) prompt.push_back(t);
    const std::size_t before_a = batched->decodes(), before_b = one_by_one->decodes();
    const DraftTicks run = tick_drafters(*batched, *one_by_one, prompt, 40);
    EXPECT_GT(run.full_accepts, 3u);
    EXPECT_GT(run.extra_tokens, 0u);
    // Every catch-up token beyond a call's first was a decode of its own (the prompt's, larger
    // than a tick accepts, went in one batch in both).
    EXPECT_EQ(one_by_one->decodes() - before_b, batched->decodes() - before_a + run.extra_tokens);
  }
}

}  // namespace
}  // namespace uma::test
