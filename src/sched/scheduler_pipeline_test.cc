// The pipelined tick against the fake decoder in its asynchronous mode: the same streams as
// without it, what ends a request mid-flight (EOS, max_tokens, a stop string, a cancellation, an
// arrival), KV left exact, and no pipelining where the decoder is synchronous.
#include <gtest/gtest.h>

#include "sched/scheduler.h"
#include "sched/scheduler_test_support.h"

namespace uma {
namespace {

using testing_support::Outcome;
using testing_support::SchedulerTest;

class PipelineTest : public SchedulerTest {
 protected:
  // Speculation is off: repeated prompt tokens would give lookup drafts, which stop the pipeline.
  void start(bool async, bool per_seq, SchedulerConfig cfg = {}) {
    out_.clear();
    cfg.speculate = false;
    make(/*n_batch=*/512, /*n_ctx=*/2048, /*n_seq=*/16, cfg, per_seq);
    decoder_->async_ = async;
  }
  // Eight streams (prompts of 41 tokens: long enough to keep) of different lengths whose tokens never meet (the fake's next token is the last
  // + 1); request 3 stops on a string, request 5 on EOS.
  static std::string prompt_of(RequestId id) { return std::string(40, static_cast<char>(30 + 25 * (id - 1))); }
  std::map<RequestId, Outcome> run_mix() {
    decoder_->eos_after_ = 100 + 130 + 9;  // request 5 (prompt 130): its 9th token is EOS
    for (RequestId id = 1; id <= 8; ++id) {
      std::vector<std::string> stop;
      if (id == 3) stop = {"<" + std::to_string(100 + 80 + 7) + ">"};  // its 7th token's text
      submit(id, prompt_of(id), 8 + 2 * static_cast<std::int32_t>(id), stop);
    }
    run_until_idle();
    return out_;
  }
};

TEST_F(PipelineTest, StreamsAreTheSameWithAndWithoutPipelinedTicks) {
  SchedulerConfig cfg;  // every finished sequence is kept: what it holds is compared
  cfg.prefix.enabled = true;
  cfg.prefix.max_kept = 8;
  cfg.per_seq_min_reuse = 0;
  cfg.unified_keep_unseen_min = 0;
  for (bool per_seq : {false, true}) {
    start(/*async=*/false, per_seq, cfg);
    const std::uint64_t pipelined_before = metrics_.pipelined_ticks_total.load();
    const auto plain = run_mix();
    const std::int32_t kv_plain = decoder_->total_kv();
    scheduler_->publish_metrics();
    const std::int64_t host_plain = metrics_.prefix_host_bytes.load();
    EXPECT_GT(kv_plain * static_cast<std::int64_t>(sizeof(Token)) + host_plain, 0);
    EXPECT_EQ(metrics_.pipelined_ticks_total.load(), pipelined_before) << "a synchronous decoder never pipelines";
    start(/*async=*/true, per_seq, cfg);
    const auto piped = run_mix();
    EXPECT_GT(metrics_.pipelined_ticks_total.load(), pipelined_before + 10) << per_seq;
    for (RequestId id = 1; id <= 8; ++id) {
      EXPECT_EQ(piped.at(id).text, plain.at(id).text) << id << " per_seq " << per_seq;
      EXPECT_EQ(piped.at(id).reason, plain.at(id).reason) << id;
      EXPECT_EQ(piped.at(id).completion_tokens, plain.at(id).completion_tokens) << id;
      EXPECT_EQ(piped.at(id).done, 1) << id;
    }
    EXPECT_EQ(piped.at(3).reason, FinishReason::kStop);
    EXPECT_EQ(piped.at(5).reason, FinishReason::kStop);
    EXPECT_EQ(piped.at(8).reason, FinishReason::kLength);
    // The kept prefixes hold exactly what they held without (in KV, or in host memory where a
    // unified KV saves its leaves): the stop string's extra row is gone.
    EXPECT_EQ(decoder_->total_kv(), kv_plain) << "per_seq " << per_seq;
    scheduler_->publish_metrics();
    EXPECT_EQ(metrics_.prefix_host_bytes.load(), host_plain) << "snapshots of the kept sequences";
    EXPECT_GT(decoder_->trimmed_tokens_, 0) << "the row after the stop string was computed, then trimmed";
  }
}

TEST_F(PipelineTest, ACancellationOrAnArrivalSettlesTheDecodeInFlight) {
  start(/*async=*/true, /*per_seq=*/true);
  submit(1, "a", 40);
  submit(2, "b", 40);
  for (int k = 0; k < 6; ++k) scheduler_->tick(events_);
  collect();
  ASSERT_GT(metrics_.pipelined_ticks_total.load(), 0u);
  const std::size_t before = out_[1].text.size();
  scheduler_->cancel(1, events_);  // reads the decode in flight first: its tokens are delivered
  collect();
  EXPECT_GT(out_[1].text.size(), before) << "the tokens of the decode in flight came out before the end";
  EXPECT_EQ(out_[1].reason, FinishReason::kCancelled);
  submit(3, "c", 5);  // an arrival: its prompt is planned in an ordinary tick
  run_until_idle();
  EXPECT_EQ(out_[2].text, expected(100 + 'b', 40));
  EXPECT_EQ(out_[3].text, expected(100 + 'c', 5));
  EXPECT_EQ(out_[2].done + out_[3].done, 2);
  EXPECT_EQ(decoder_->total_kv(), 0) << "nothing kept (short prompts), nothing leaked";
}

TEST_F(PipelineTest, AFailedPipelinedDecodeFailsItsSessionsOnly) {
  start(/*async=*/true, /*per_seq=*/false);
  submit(1, "a", 30);
  submit(2, "b", 30);
  for (int k = 0; k < 4; ++k) scheduler_->tick(events_);
  collect();
  ASSERT_GT(metrics_.pipelined_ticks_total.load(), 0u);
  decoder_->fail_next_ = true;  // the next launch (pipelined) fails
  run_until_idle();
  EXPECT_EQ(out_[1].errors, 1);
  EXPECT_EQ(out_[2].errors, 1);
  EXPECT_EQ(out_[1].error, ErrorCode::kDecodeFailed);
  EXPECT_EQ(decoder_->total_kv(), 0) << "failed sessions keep nothing";
  submit(3, "c", 4);  // the daemon goes on
  run_until_idle();
  EXPECT_EQ(out_[3].text, expected(100 + 'c', 4));
}

TEST_F(PipelineTest, OffByConfigurationOrWhilePromptsWait) {
  SchedulerConfig cfg;
  cfg.pipelined_ticks = false;
  start(/*async=*/true, /*per_seq=*/true, cfg);
  submit(1, "a", 20);
  run_until_idle();
  EXPECT_EQ(metrics_.pipelined_ticks_total.load(), 0u);
  EXPECT_EQ(out_[1].text, expected(100 + 'a', 20));
}

}  // namespace
}  // namespace uma
