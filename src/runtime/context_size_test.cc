#include "runtime/context_size.h"

#include <gtest/gtest.h>

namespace uma {
namespace {

TEST(ContextSize, TheTrainedContextWhenItsKvFitsElseTheLargestThatDoes) {
  const std::int64_t per_token = 128 * 1024;  // an 8B at f16: 128 KiB of KV a token
  // Fits: the trained context.
  ContextChoice c = choose_context(8192, per_token, std::int64_t{4} << 30);
  EXPECT_EQ(c.n_ctx, 8192);
  EXPECT_NE(c.why.find("trained"), std::string::npos);
  // 131072 trained needs 16 GiB; 3 GiB of budget holds 24576 tokens.
  c = choose_context(131072, per_token, std::int64_t{3} << 30);
  EXPECT_EQ(c.n_ctx, 24576);
  EXPECT_NE(c.why.find("largest that fits"), std::string::npos) << c.why;
  EXPECT_NE(c.why.find("16384 MiB"), std::string::npos) << c.why;
  // A budget that holds less than a step: one step, never zero.
  EXPECT_EQ(choose_context(131072, per_token, 1000).n_ctx, kContextStep);
  // Not rounded past what fits.
  EXPECT_EQ(choose_context(131072, per_token, per_token * 1000).n_ctx, 768);
  // Unknown memory or a model that names no context.
  EXPECT_EQ(choose_context(32768, per_token, -1).n_ctx, 32768);
  EXPECT_EQ(choose_context(0, per_token, std::int64_t{1} << 40).n_ctx, kFallbackContext);
}

TEST(ContextSize, FlashAttentionIsOffOnlyForAUnifiedKvOnACpuOrWhenAskedOff) {
  for (bool cpu_only : {false, true}) {
    for (bool per_seq : {false, true}) {
      EXPECT_EQ(choose_flash_attention(FlashAttention::kOn, cpu_only, per_seq), FlashAttention::kOn);
      EXPECT_EQ(choose_flash_attention(FlashAttention::kOff, cpu_only, per_seq), FlashAttention::kOff);
    }
  }
  EXPECT_EQ(choose_flash_attention(FlashAttention::kAuto, /*cpu_only=*/true, /*per_seq=*/false), FlashAttention::kOff);
  EXPECT_EQ(choose_flash_attention(FlashAttention::kAuto, /*cpu_only=*/true, /*per_seq=*/true), FlashAttention::kAuto);
  EXPECT_EQ(choose_flash_attention(FlashAttention::kAuto, /*cpu_only=*/false, /*per_seq=*/false), FlashAttention::kAuto);
  EXPECT_EQ(choose_flash_attention(FlashAttention::kAuto, /*cpu_only=*/false, /*per_seq=*/true), FlashAttention::kAuto);
  EXPECT_EQ(enum_name(kFlashAttentionNames, FlashAttention::kOff), "off");
}

TEST(RuntimeModes, EveryWordParsesToItsModeAndBack) {
  KvLayout layout = KvLayout::kAuto;
  for (std::string_view w : {"auto", "unified", "per-seq"}) {
    ASSERT_TRUE(parse_enum(kKvLayoutNames, w, &layout)) << w;
    EXPECT_EQ(enum_name(kKvLayoutNames, layout), w);
  }
  EXPECT_FALSE(parse_enum(kKvLayoutNames, "perseq", &layout));
  EXPECT_EQ(layout, KvLayout::kPerSeq);  // untouched by the refused word
  DeviceSampling ds = DeviceSampling::kAuto;
  ASSERT_TRUE(parse_enum(kDeviceSamplingNames, "off", &ds));
  EXPECT_EQ(ds, DeviceSampling::kOff);
  EXPECT_EQ(enum_words(kFlashAttentionNames), (std::vector<std::string>{"auto", "on", "off"}));
  EXPECT_TRUE(kv_per_sequence(KvLayout::kAuto, 2));
  EXPECT_FALSE(kv_per_sequence(KvLayout::kAuto, 1));
  EXPECT_FALSE(kv_per_sequence(KvLayout::kUnified, 8));
  EXPECT_TRUE(kv_per_sequence(KvLayout::kPerSeq, 1));
}

}  // namespace
}  // namespace uma
