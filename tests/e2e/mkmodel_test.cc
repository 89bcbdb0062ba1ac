// uma-mkmodel: deterministic output for every type, loadable by llama.cpp, and a working oracle.
#include <gtest/gtest.h>
#include <llama.h>

#include <algorithm>
#include <fstream>
#include <iterator>

#include "e2e/daemon_harness.h"
#include "e2e/oracle.h"

namespace uma::test {
namespace {


std::string make(const std::string& preset, const std::string& type, int seed) {
  const std::string out = temp_dir() + "/" + preset + "-" + type + "-" + std::to_string(seed) + ".gguf";
  std::string log;
  EXPECT_EQ(run_command({bin_path("uma-mkmodel"), "--preset", preset, "--type", type, "--seed",
                         std::to_string(seed), "-o", out, "--threads", "2"}, &log), 0) << log;
  return out;
}

TEST(MkModel, SameSeedSameBytesForEveryType) {
  for (const std::string type : {"f32", "f16", "q8_0", "q4_0"}) {
    const std::string a = slurp(make("tiny", type, 7));
    const std::string a2 = slurp(make("tiny", type, 7));
    ASSERT_GT(a.size(), 1000000u) << type;
    EXPECT_EQ(a, a2) << type << " is not deterministic";
  }
  EXPECT_NE(slurp(make("tiny", "f16", 7)), slurp(make("tiny", "f16", 8))) << "seed has no effect";
  // Quantized files are smaller than f32, in the expected order.
  EXPECT_LT(slurp(make("tiny", "q4_0", 7)).size(), slurp(make("tiny", "q8_0", 7)).size());
  EXPECT_LT(slurp(make("tiny", "q8_0", 7)).size(), slurp(make("tiny", "f16", 7)).size());
}

TEST(MkModel, ModelsLoadWithTheRealTokenizerAndShape) {
  llama_backend_init();
  const std::string path = make("tiny", "q8_0", 3);
  llama_model_params p = llama_model_default_params();
  llama_model* m = llama_model_load_from_file(path.c_str(), p);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(llama_model_n_embd(m), 64);
  EXPECT_EQ(llama_model_n_layer(m), 2);
  EXPECT_EQ(llama_model_n_head(m), 4);
  EXPECT_EQ(llama_model_n_head_kv(m), 2);
  EXPECT_EQ(llama_vocab_n_tokens(llama_model_get_vocab(m)), 32000);
  llama_model_free(m);
  // "hello world" tokenizes as in llama.cpp's SentencePiece vocab (NOTES.md: 22172, 3186).
  const Oracle o(model_path("oracle.gguf"));
  EXPECT_EQ(o.tokenize("hello world"), (std::vector<std::int32_t>{1, 22172, 3186}));
}

// --agree: an oracle-built draft predicts t + 1 after exactly the tokens oracle_agrees names (so a
// target and its draft agree on that share), and something else after the others.
TEST(MkModel, AnAgreeingDraftPredictsTheOraclesTokenOnItsShareOfTokens) {
  const std::string path = temp_dir() + "/draft-agree.gguf";
  std::string log;
  ASSERT_EQ(run_command({bin_path("uma-mkmodel"), "--preset", "tiny", "--oracle", "--agree", "0.7", "--type", "f32",
                         "-o", path}, &log), 0) << log;
  EXPECT_NE(run_command({bin_path("uma-mkmodel"), "--preset", "tiny", "--agree", "0.7", "-o", path + ".x"}, &log), 0)
      << "--agree without an oracle is refused";
  llama_backend_init();
  llama_model* m = llama_model_load_from_file(path.c_str(), llama_model_default_params());
  ASSERT_NE(m, nullptr);
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = 1024;
  cp.n_batch = 512;
  llama_context* ctx = llama_init_from_model(m, cp);
  ASSERT_NE(ctx, nullptr);
  constexpr int kTokens = 400;
  llama_batch b = llama_batch_init(kTokens, 0, 1);
  for (int i = 0; i < kTokens; ++i) {
    b.token[i] = 5000 + 37 * i;
    b.pos[i] = i;
    b.n_seq_id[i] = 1;
    b.seq_id[i][0] = 0;
    b.logits[i] = 1;
  }
  b.n_tokens = kTokens;
  ASSERT_EQ(llama_decode(ctx, b), 0);
  const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(m));
  int agreeing = 0;
  for (int i = 0; i < kTokens; ++i) {
    const float* row = llama_get_logits_ith(ctx, i);
    const int best = static_cast<int>(std::max_element(row, row + n_vocab) - row);
    const bool agrees = oracle_agrees(b.token[i], 0.7);
    EXPECT_EQ(best == b.token[i] + 1, agrees) << "token " << b.token[i] << " predicts " << best;
    agreeing += agrees;
  }
  EXPECT_NEAR(agreeing / static_cast<double>(kTokens), 0.7, 0.08);
  llama_batch_free(b);
  llama_free(ctx);
  llama_model_free(m);
}

}  // namespace
}  // namespace uma::test
