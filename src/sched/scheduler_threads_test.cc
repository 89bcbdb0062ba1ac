// Threads that follow the machine, as the scheduler applies them: a fake meter plays the machine
// (a neighbour's cores, how much CPU each decode's threads got) on the tests' virtual clock.
#include <gtest/gtest.h>

#include <algorithm>

#include "sched/cpu_meter.h"
#include "sched/scheduler.h"
#include "sched/scheduler_test_support.h"

namespace uma {
namespace {

using testing_support::SchedulerTest;

// The machine: `allowed` cores; others keep `others` of them busy; each decode's threads get
// `share` of their wall time on a core.
class FakeCpuMeter final : public CpuMeter {
 public:
  int allowed = 2;
  double others = 0.0;
  double share = 1.0;
  int samples = 0;

  int allowed_cores() const override { return allowed; }
  double process_cpu_ms() const override { return own_; }
  bool sample(CpuSample* out) override {
    ++samples;
    *out = {wall_, busy_, own_};
    return true;
  }
  void decode(double ms, int threads) {
    const double mine = ms * threads * share;
    wall_ += ms;
    own_ += mine;
    busy_ += mine + others * ms;
  }

 private:
  double wall_ = 0.0, busy_ = 0.0, own_ = 0.0;
};

class SchedulerThreads : public SchedulerTest {
 protected:
  static constexpr double kDecodeMs = 10.0;
  void start(bool adaptive) {
    make(/*n_batch=*/64, /*n_ctx=*/4096, /*n_seq=*/4);
    decoder_->threads_ = meter_.allowed;
    decoder_->on_host_ = true;
    decoder_->on_decode_ = [this](std::span<const BatchEntry>) {
      clock_.advance(std::chrono::milliseconds(static_cast<int>(kDecodeMs)));
      meter_.decode(kDecodeMs, decoder_->threads_);
    };
    scheduler_->use_cpu_meter(&meter_, adaptive);
  }
  // Ticks until `ticks` more decodes ran (or the work ended).
  void run(int ticks) {
    for (int k = 0; k < ticks && scheduler_->has_work(); ++k) {
      scheduler_->tick(events_);
      collect();
    }
  }
  std::int32_t last_threads() const { return decoder_->decode_threads_.back(); }

  FakeCpuMeter meter_;
};

TEST_F(SchedulerThreads, ANeighbourOnACoreLeavesTheDecodesOneThreadUntilItGoesAndTheStreamsStayExact) {
  start(/*adaptive=*/true);
  submit(1, "abc", 400);
  submit(2, "hello", 400);
  run(30);  // a window is 25 decodes of 10 ms
  EXPECT_EQ(last_threads(), 2) << "a quiet machine: every core";
  meter_.others = 1.0;  // `yes` on one core
  run(50);
  EXPECT_EQ(last_threads(), 1);
  EXPECT_NEAR(metrics_.cpu_others_cores.load(), 1.0, 1e-9);
  EXPECT_EQ(metrics_.compute_threads.load(), 1);
  meter_.others = 0.05;
  run(25);
  EXPECT_EQ(last_threads(), 1) << "one quiet window is not enough to grow";
  run(50);
  EXPECT_EQ(last_threads(), 2);
  EXPECT_EQ(metrics_.compute_thread_changes_total.load(), 2u);
  run_until_idle();
  EXPECT_EQ(out_[1].text, expected(100 + 'c', 400));
  EXPECT_EQ(out_[2].text, expected(100 + 'o', 400));
  const auto& t = decoder_->decode_threads_;
  EXPECT_NE(std::find(t.begin(), t.end(), 1), t.end());
}

TEST_F(SchedulerThreads, AStarvedDecodeShrinksThePoolBeforeTheWindowEnds) {
  start(/*adaptive=*/true);
  submit(1, "abc", 40);
  run(3);
  ASSERT_EQ(last_threads(), 2);
  meter_.share = 0.5;  // half the pool's time went waiting for a taken core
  run(1);
  run(1);
  EXPECT_EQ(last_threads(), 1) << "the decode after the starved one";
  EXPECT_LT(meter_.samples, 3) << "no window had ended";
}

TEST_F(SchedulerThreads, AFixedCountIsKeptAndTheNeighbourStillReported) {
  start(/*adaptive=*/false);
  meter_.others = 1.0;
  meter_.share = 0.4;
  submit(1, "abc", 100);
  run_until_idle();
  EXPECT_EQ(out_[1].text, expected(100 + 'c', 100));
  for (std::int32_t n : decoder_->decode_threads_) EXPECT_EQ(n, 2);
  EXPECT_EQ(metrics_.compute_thread_changes_total.load(), 0u);
  EXPECT_NEAR(metrics_.cpu_others_cores.load(), 1.0, 1e-9);
}

}  // namespace
}  // namespace uma
