// Batch building with images in prompts: a chunk is all text or all one image's, image entries
// carry their embedding rows, and only a chunk that completes the prompt asks for logits.
#include "sched/batch_builder.h"

#include <gtest/gtest.h>

#include <memory>

namespace uma {
namespace {

constexpr std::int32_t kWidth = 3;  // floats per embedding row

PromptImage image_at(std::int32_t pos, std::int32_t n) {
  auto embd = std::make_shared<std::vector<float>>(static_cast<std::size_t>(n * kWidth));
  for (std::size_t i = 0; i < embd->size(); ++i) (*embd)[i] = static_cast<float>(100 * pos + i);
  return PromptImage{pos, n, std::move(embd)};
}

// tokens 0..1 text, 2..5 an image, 6..7 text, 8..9 an image (the prompt ends in it).
Session session_with_images() {
  Session s;
  s.seq = 0;
  s.state = SessionState::kPrefill;
  s.tokens = {1, 2, -7, -8, -9, -10, 3, 4, -11, -12};
  s.images = {image_at(2, 4), image_at(8, 2)};
  return s;
}

TEST(BatchBuilderImages, AChunkStopsAtAnImagesEdgesAndItsEntriesCarryTheRows) {
  Session s = session_with_images();
  Session* order[] = {&s};
  TickPlan plan;
  plan.prefill = {{0, 100}};
  BuiltBatch out;
  const std::int32_t want_lengths[] = {2, 4, 2, 2};
  for (std::int32_t length : want_lengths) {
    build_batch(plan, order, out);
    ASSERT_EQ(out.prefilled.size(), 1u);
    ASSERT_EQ(out.prefilled[0].length, length) << "from " << s.n_prefilled;
    const PromptImage* image = s.image_at(s.n_prefilled);
    for (std::int32_t k = 0; k < length; ++k) {
      const BatchEntry& e = out.entries[static_cast<std::size_t>(k)];
      EXPECT_EQ(e.pos, s.n_prefilled + k);
      if (image == nullptr) {
        EXPECT_EQ(e.embd, nullptr);
      } else {
        ASSERT_NE(e.embd, nullptr);
        EXPECT_EQ(e.embd[0], static_cast<float>(100 * image->pos + kWidth * (e.pos - image->pos)));
      }
    }
    const bool last = s.n_prefilled + length == static_cast<std::int32_t>(s.tokens.size());
    EXPECT_EQ(out.rows.size(), last ? 1u : 0u) << "logits only where the prompt completes, an image's row included";
    s.n_prefilled += length;
  }
}

TEST(BatchBuilderImages, AChunkStartingInsideAnImageRunsToItsEndAtMost) {
  Session s = session_with_images();
  s.n_prefilled = 3;  // a kept prefix ended inside the image
  Session* order[] = {&s};
  TickPlan plan;
  plan.prefill = {{0, 2}};
  BuiltBatch out;
  build_batch(plan, order, out);
  ASSERT_EQ(out.prefilled[0].length, 2);
  EXPECT_EQ(out.entries[0].embd[0], static_cast<float>(200 + kWidth));
  plan.prefill = {{0, 50}};
  s.n_prefilled = 5;
  build_batch(plan, order, out);
  EXPECT_EQ(out.prefilled[0].length, 1) << "the image's last position, then text in the next chunk";
  EXPECT_EQ(s.prefill_run_end(6), 8);
  EXPECT_EQ(s.prefill_run_end(9), 10);
}

}  // namespace
}  // namespace uma
