// What the scheduler's speculative-decoding tests share (scheduler_spec_test.cc: drafts from
// lookups and predictions, what verifying costs; scheduler_draft_model_test.cc: a draft model,
// pipelined ticks, shapes): the fixture over the fake decoder (its "model" predicts token + 1 and
// it checks that every position is contiguous, so a draft's rejected cells left in KV, or an
// n_past that disagrees with the KV, fails the next decode) and a fake draft model.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "runtime/drafter.h"
#include "sched/scheduler.h"
#include "sched/scheduler_test_support.h"

namespace uma::testing_support {

// "abcdefghijklmnop XYZ abc": after the last "abc" the model goes on d, e, f, ...: the prompt
// holds that run up to p, then X, which the model does not predict.
inline const std::string kCopyPrompt = "abcdefghijklmnopXYZabc";

class SpecSchedulerTest : public SchedulerTest {
 protected:
  void start(bool speculate, bool per_seq = false, std::int32_t n_seq = 8) {
    SchedulerConfig cfg;
    cfg.speculate = speculate;
    make(/*n_batch=*/256, /*n_ctx=*/4096, n_seq, cfg, per_seq);
    // 10 ms a tick and 0.2 ms a token: rows are cheap next to the tick, as on a lone stream.
    decoder_->on_decode_ = [this](std::span<const BatchEntry> b) {
      clock_.advance(std::chrono::microseconds(10000 + 200 * static_cast<long>(b.size())));
    };
    ASSERT_TRUE(scheduler_->calibrate(1e9).ok());
  }
  // Two 600-token streams on a GPU-like device: a decode runs from its launch (or the device's last
  // work) for device_us(rows), synchronize() waits for it, and the compute loop spends host_us
  // after each tick. Returns the virtual ms until both ended, their outputs checked exact and
  // their KV freed; `drafter` (may be null) drafts for them.
  double two_streams_on_async_device(const std::function<long(std::span<const BatchEntry>)>& device_us, long host_us,
                                     Drafter* drafter) {
    start(true);
    out_.clear();
    decoder_->async_ = true;
    auto busy_until = std::make_shared<Clock::time_point>();
    decoder_->on_decode_ = [this, busy_until, device_us](std::span<const BatchEntry> b) {
      *busy_until = std::max(*busy_until, clock_.now()) + std::chrono::microseconds(device_us(b));
    };
    decoder_->on_synchronize_ = [this, busy_until] {
      if (clock_.now() < *busy_until) clock_.advance(std::chrono::duration_cast<std::chrono::microseconds>(*busy_until - clock_.now()));
    };
    if (drafter != nullptr) scheduler_->set_drafter(drafter);
    submit(1, "b", 600);
    submit(2, "c", 600);
    const Clock::time_point t0 = clock_.now();
    while (scheduler_->has_work()) {
      scheduler_->tick(events_);
      collect();
      clock_.advance(std::chrono::microseconds(host_us));
    }
    EXPECT_EQ(out_[1].text, expected(100 + 'b', 600));
    EXPECT_EQ(out_[2].text, expected(100 + 'c', 600));
    EXPECT_EQ(decoder_->total_kv(), 0);
    scheduler_.reset();
    return std::chrono::duration<double, std::milli>(clock_.now() - t0).count();
  }
};

// A draft model for the fake "model" (token + 1): after token t it proposes t + 1 where `agree(t)`,
// else t + 2; it checks the jobs it gets.
class FakeDrafter final : public Drafter {
 public:
  explicit FakeDrafter(std::function<bool(Token)> agree) : agree_(std::move(agree)) {}
  Status draft(std::span<const DraftJob> jobs) override {
    ++calls_;
    last_fed_ = 0;
    for (const DraftJob& j : jobs) {
      last_fed_ += lag(j.seq, j.tokens);
      fed_[j.seq] = j.tokens.size();
    }
    if (on_draft_) on_draft_();
    for (const DraftJob& j : jobs) {
      EXPECT_GT(j.k, 0);
      EXPECT_FALSE(j.tokens.empty());
      j.out->clear();
      Token t = j.tokens.back();
      for (std::int32_t i = 0; i < j.k; ++i) j.out->push_back(t = agree_(t) ? t + 1 : t + 2);
      drafted_ += j.k;
    }
    return Status::Ok();
  }
  void forget(std::int32_t seq) override {
    forgotten_.push_back(seq);
    fed_.erase(seq);
  }
  double step_ms(std::size_t) const override { return 0.5; }
  // It holds what it was given last (its proposals aside): the rest is caught up.
  std::size_t lag(std::int32_t seq, std::span<const Token> tokens) const override {
    const auto it = fed_.find(seq);
    return tokens.size() - (it == fed_.end() ? 0 : std::min(it->second, tokens.size() - 1));
  }
  double catch_up_ms(std::size_t tokens) const override { return catch_up_ms_per_token_ * static_cast<double>(tokens); }
  double catch_up_ms_per_token_ = 0.0;
  std::size_t last_fed_ = 0;  // tokens the last call caught up
  int calls_ = 0;
  std::int32_t drafted_ = 0;
  std::function<void()> on_draft_;  // what a call costs (the test's clock)
  std::vector<std::int32_t> forgotten_;

 private:
  std::function<bool(Token)> agree_;
  std::map<std::int32_t, std::size_t> fed_;
};

// Verifying ticks by their rows: how many, the commonest shape's count, and all of them as text.
struct ShapeTally {
  int verifying = 0, most = 0;
  std::string seen;
};
inline ShapeTally tally(const std::map<std::size_t, int>& shapes) {
  ShapeTally t;
  for (const auto& [rows, n] : shapes) {
    t.verifying += n, t.most = std::max(t.most, n);
    t.seen += " " + std::to_string(rows) + ":" + std::to_string(n);
  }
  return t;
}

}  // namespace uma::testing_support
