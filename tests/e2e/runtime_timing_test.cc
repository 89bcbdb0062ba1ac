// UMA_DECODE_TIMING=pipelined: decodes are timed where the caller synchronises, not made to wait
// at once, so the results are the untimed runtime's, and every 100 synchronised decodes a summary
// with each part of a tick (launch, host until needed, wait, period) is logged.
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <sstream>

#include "e2e/tiny_runtime.h"
#include "runtime/argmax.h"
#include "runtime/llama_runtime.h"

namespace uma::test {
namespace {

// The default logger's output while it lives.
class LogCapture {
 public:
  LogCapture() : sink_(std::make_shared<spdlog::sinks::ostream_sink_mt>(text_)) {
    spdlog::default_logger()->sinks().push_back(sink_);
  }
  ~LogCapture() {
    auto& sinks = spdlog::default_logger()->sinks();
    std::erase(sinks, sink_);
  }
  std::string text() const { return text_.str(); }

 private:
  std::ostringstream text_;
  std::shared_ptr<spdlog::sinks::ostream_sink_mt> sink_;
};

std::unique_ptr<LlamaRuntime> open_runtime(const char* timing) {
  if (timing != nullptr) setenv("UMA_DECODE_TIMING", timing, 1);
  auto rt = open_tiny_runtime([](RuntimeConfig& cfg) { cfg.backend_sampling = DeviceSampling::kOff; });
  unsetenv("UMA_DECODE_TIMING");  // read at open
  return rt;
}

TEST(DecodeTiming, PipelinedTimingLeavesResultsAsTheyAreAndSummarisesEachPartOfATick) {
  LogCapture log;
  auto timed = open_runtime("pipelined");
  auto plain = open_runtime(nullptr);
  ASSERT_TRUE(timed && plain);
  const std::vector<Token> prompt = tiny_prompt(12, 1);
  for (LlamaRuntime* rt : {timed.get(), plain.get()}) {
    ASSERT_TRUE(rt->start_sequence(0, SamplingParams{}).ok());
    std::vector<BatchEntry> batch;
    for (std::size_t i = 0; i < prompt.size(); ++i) batch.push_back({prompt[i], static_cast<std::int32_t>(i), 0, i + 1 == prompt.size()});
    ASSERT_TRUE(rt->decode(batch).ok());
    rt->synchronize();
  }
  auto pick = [](LlamaRuntime& rt, std::int32_t row) {
    const std::span<const float> l = rt.logits(row);
    return argmax_first(l.data(), static_cast<std::int32_t>(l.size()));
  };
  Token next = pick(*plain, static_cast<std::int32_t>(prompt.size()) - 1);
  ASSERT_EQ(pick(*timed, static_cast<std::int32_t>(prompt.size()) - 1), next);
  // 101 decodes after the first: the summary comes at the 100th timed one.
  for (std::int32_t step = 0; step < 101; ++step) {
    const std::vector<BatchEntry> batch = {{next, static_cast<std::int32_t>(prompt.size()) + step, 0, true}};
    ASSERT_TRUE(timed->decode(batch).ok());
    ASSERT_TRUE(plain->decode(batch).ok());
    timed->synchronize();
    plain->synchronize();
    const std::span<const float> a = timed->logits(0), b = plain->logits(0);
    ASSERT_EQ(a.size(), b.size());
    for (std::size_t k = 0; k < a.size(); ++k) ASSERT_EQ(a[k], b[k]) << "step " << step << ", logit " << k;
    next = pick(*plain, 0);
  }
  const std::string text = log.text();
  EXPECT_NE(text.find("decode timing (pipelined), 100 calls"), std::string::npos) << text;
  EXPECT_NE(text.find("host until needed p50"), std::string::npos) << text;
  EXPECT_NE(text.find("period p50"), std::string::npos) << text;
  EXPECT_EQ(text.find("decode timing, 100 calls"), std::string::npos) << "the untimed runtime logs nothing";
}

}  // namespace
}  // namespace uma::test
