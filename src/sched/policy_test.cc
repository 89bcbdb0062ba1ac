#include "sched/policy.h"
#include "sched/tick_budget.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace uma {
namespace {

Candidate decoding(bool overdue = false, Rank rank = Rank::kUrgent) { return {true, 0, overdue, rank, 0.0}; }
Candidate prefilling(std::int32_t remaining, Rank rank = Rank::kUrgent, double slack_ms = 0.0) {
  return {false, remaining, false, rank, slack_ms};
}

TEST(Policy, EveryDecodingSessionGetsOneTokenThenPrefillFillsTheBudget) {
  const std::vector<Candidate> c = {prefilling(100), decoding(), decoding(), prefilling(5)};
  const TickPlan p = plan_tick(c, {/*budget=*/38, /*capacity=*/512, /*min_prefill=*/8, false});
  EXPECT_EQ(p.decode, (std::vector<std::size_t>{1, 2}));
  ASSERT_EQ(p.prefill.size(), 1u);  // all 38 to the first in round-robin order
  EXPECT_EQ(p.prefill[0], (std::pair<std::size_t, std::int32_t>{0, 38}));
  EXPECT_FALSE(p.guard_fired);
}

TEST(Policy, WithNobodyDecodingPrefillUsesTheWholeCapacity) {
  const std::vector<Candidate> c = {prefilling(300), prefilling(300)};
  const TickPlan p = plan_tick(c, {/*budget=*/32, /*capacity=*/512, 8, false});
  ASSERT_EQ(p.prefill.size(), 2u);
  EXPECT_EQ(p.prefill[0].second, 300);
  EXPECT_EQ(p.prefill[1].second, 212);
}

TEST(Policy, ShortPromptsShareTheBudgetInOrder) {
  const std::vector<Candidate> c = {prefilling(10), prefilling(10), prefilling(100), decoding()};
  const TickPlan p = plan_tick(c, {32, 512, 8, false});
  ASSERT_EQ(p.prefill.size(), 3u);
  EXPECT_EQ(p.prefill[0].second, 10);
  EXPECT_EQ(p.prefill[1].second, 10);
  EXPECT_EQ(p.prefill[2].second, 12);
}

// Per-sequence KV: every chunk is a pass of its own, so prompts are not cut when they need not be.
PolicyInput whole_prompts(std::int32_t budget, std::int32_t min_prefill = 64) {
  PolicyInput in{budget, 512, min_prefill, false};
  in.whole_prompts = true;
  return in;
}

TEST(Policy, WholePromptsAPromptThatFitsALaterTickWholeWaitsForIt) {
  const std::vector<Candidate> c = {prefilling(150), prefilling(160), prefilling(40), decoding()};
  const TickPlan p = plan_tick(c, whole_prompts(300));
  ASSERT_EQ(p.prefill.size(), 2u);  // 160 does not fit the 150 left, but fits a tick whole: it waits
  EXPECT_EQ(p.prefill[0], (std::pair<std::size_t, std::int32_t>{0, 150}));
  EXPECT_EQ(p.prefill[1], (std::pair<std::size_t, std::int32_t>{2, 40}));
  // Without the rule the same tick cuts the second prompt into 150 + 10.
  const TickPlan cut = plan_tick(c, {300, 512, 64, false});
  EXPECT_EQ(cut.prefill[1], (std::pair<std::size_t, std::int32_t>{1, 150}));
}

TEST(Policy, WholePromptsAPromptLongerThanTheBudgetTakesWhatIsLeft) {
  const std::vector<Candidate> first = {prefilling(1000), decoding()};
  const TickPlan alone = plan_tick(first, whole_prompts(300));
  ASSERT_EQ(alone.prefill.size(), 1u);
  EXPECT_EQ(alone.prefill[0].second, 300);
  const std::vector<Candidate> second = {prefilling(100), prefilling(1000), decoding()};
  const TickPlan after = plan_tick(second, whole_prompts(300));
  ASSERT_EQ(after.prefill.size(), 2u);
  EXPECT_EQ(after.prefill[1].second, 200);
  // A leftover under min_prefill is not worth a pass of its own.
  const std::vector<Candidate> third = {prefilling(250), prefilling(1000), decoding()};
  EXPECT_EQ(plan_tick(third, whole_prompts(300)).prefill.size(), 1u);
}

TEST(Policy, WholePromptsWithNobodyDecodingABurstIsCutToFillTheTick) {
  // Four 129-token prompts, n_batch 512: the fourth takes the 125 left, so the four streams start
  // together; put off whole, it would stall the other three's first gap by its whole prefill.
  const std::vector<Candidate> c = {prefilling(129), prefilling(129), prefilling(129), prefilling(129)};
  const TickPlan p = plan_tick(c, whole_prompts(64));
  ASSERT_EQ(p.prefill.size(), 4u);
  EXPECT_EQ(p.prefill[3], (std::pair<std::size_t, std::int32_t>{3, 125}));
  // With a stream decoding, the rule is as before: the fourth fits a later tick whole and waits.
  std::vector<Candidate> d = c;
  d.push_back(decoding());
  EXPECT_EQ(plan_tick(d, whole_prompts(512)).prefill.size(), 3u);
}

TEST(Policy, WithNobodyDecodingABurstFillsTheIdleCapacityNotJustOnePass) {
  // n_batch 2048 over passes of 512: eight 129-token prompts go in at once, so the eight streams
  // start in step; with a stream decoding a tick is still one pass's worth.
  const std::vector<Candidate> c(8, prefilling(129));
  PolicyInput in = whole_prompts(64);
  in.idle_capacity = 2048;
  const TickPlan p = plan_tick(c, in);
  ASSERT_EQ(p.prefill.size(), 8u);
  for (const auto& [i, n] : p.prefill) EXPECT_EQ(n, 129) << i;
  EXPECT_EQ(plan_tick(c, whole_prompts(64)).prefill.size(), 4u) << "without it: one pass's 512";
  std::vector<Candidate> d = c;
  d.push_back(decoding());
  in.budget = 2048;
  std::int32_t carried = 0;
  for (const auto& [i, n] : plan_tick(d, in).prefill) carried += n;
  EXPECT_LE(carried, 511) << "beside a decode row the tick stays within one pass";
}

TEST(Policy, WholePromptsAPromptLongerThanWhatDecodeLeavesIsCutNotStarved) {
  // n_batch 512 with 64 streams decoding leaves at most 448 a tick: a 470-token prompt never
  // fits whole while they run, so it is cut now (it waited forever when judged by the budget).
  std::vector<Candidate> c(64, decoding());
  c.push_back(prefilling(470));
  const TickPlan p = plan_tick(c, whole_prompts(512));
  ASSERT_EQ(p.prefill.size(), 1u);
  EXPECT_EQ(p.prefill[0], (std::pair<std::size_t, std::int32_t>{64, 448}));
}

TEST(Policy, GuardSkipsPrefillButNeverTwiceRunning) {
  const std::vector<Candidate> c = {decoding(/*overdue=*/true), prefilling(100)};
  const TickPlan first = plan_tick(c, {64, 512, 8, /*guard_fired_last_tick=*/false});
  EXPECT_TRUE(first.guard_fired);
  EXPECT_EQ(first.decode.size(), 1u);
  EXPECT_TRUE(first.prefill.empty());
  const TickPlan second = plan_tick(c, {64, 512, 8, /*guard_fired_last_tick=*/true});
  EXPECT_FALSE(second.guard_fired);
  ASSERT_EQ(second.prefill.size(), 1u);
  EXPECT_EQ(second.prefill[0].second, 64);
}

TEST(Policy, PrefillGetsItsMinimumWhenDecodeUsesTheBudget) {
  std::vector<Candidate> c(20, decoding());
  c.push_back(prefilling(1000));
  const TickPlan p = plan_tick(c, {/*budget=*/0, 512, /*min_prefill=*/8, false});
  EXPECT_EQ(p.decode.size(), 20u);
  ASSERT_EQ(p.prefill.size(), 1u);
  EXPECT_EQ(p.prefill[0].second, 8);
}

TEST(Policy, CapacityIsAHardLimit) {
  std::vector<Candidate> c(10, decoding());
  c.push_back(prefilling(1000));
  const TickPlan p = plan_tick(c, {/*budget=*/64, /*capacity=*/8, 4, false});
  EXPECT_EQ(p.decode.size(), 8u);
  EXPECT_TRUE(p.prefill.empty());
}

TEST(Policy, PrefillGoesToUrgentWorkFirstThenLeastSlack) {
  const std::vector<Candidate> c = {prefilling(100, Rank::kRelaxed, -500.0), prefilling(30, Rank::kUrgent, 90.0),
                                    decoding(), prefilling(30, Rank::kUrgent, 20.0)};
  const TickPlan p = plan_tick(c, {/*budget=*/40, 512, 8, false});
  ASSERT_EQ(p.prefill.size(), 2u);
  EXPECT_EQ(p.prefill[0], (std::pair<std::size_t, std::int32_t>{3, 30})) << "least slack first";
  EXPECT_EQ(p.prefill[1], (std::pair<std::size_t, std::int32_t>{1, 10}));
  const TickPlan roomy = plan_tick(c, {/*budget=*/100, 512, 8, false});
  ASSERT_EQ(roomy.prefill.size(), 3u);
  EXPECT_EQ(roomy.prefill[2], (std::pair<std::size_t, std::int32_t>{0, 40})) << "background takes what is left";
}

TEST(Policy, PromptsPastTheirTtftTargetStillGoLeastSlackFirst) {
  // Putting late prompts last starved a burst's first arrival (its target the shortest, it was the
  // first late) behind every later one: 2.2 s against a 349 ms target on a small CPU.
  const std::vector<Candidate> c = {prefilling(40, Rank::kUrgent, -100.0), prefilling(900, Rank::kUrgent, -2000.0),
                                    prefilling(20, Rank::kUrgent, 50.0), decoding()};
  const TickPlan p = plan_tick(c, {/*budget=*/1000, 2048, 8, false});
  ASSERT_EQ(p.prefill.size(), 3u);
  EXPECT_EQ(p.prefill[0], (std::pair<std::size_t, std::int32_t>{1, 900})) << "the latest first";
  EXPECT_EQ(p.prefill[1].first, 0u);
  EXPECT_EQ(p.prefill[2].first, 2u) << "can still make it: last";
}

TEST(Policy, WithNobodyDecodingBackgroundPrefillIsCappedSoArrivalsWaitLittle) {
  Candidate bg = prefilling(2000, Rank::kRelaxed);
  bg.background = true;
  const std::vector<Candidate> c = {bg, prefilling(30, Rank::kUrgent)};
  PolicyInput in{32, 512, 8, false};
  in.background_idle_cap = 64;
  const TickPlan p = plan_tick(c, in);
  ASSERT_EQ(p.prefill.size(), 2u);
  EXPECT_EQ(p.prefill[0], (std::pair<std::size_t, std::int32_t>{1, 30})) << "interactive: all of it";
  EXPECT_EQ(p.prefill[1], (std::pair<std::size_t, std::int32_t>{0, 64})) << "background: up to the cap";
  bg.rank = Rank::kUrgent;  // waited past its bound: first in line, but still capped
  EXPECT_EQ(plan_tick(std::vector<Candidate>{bg}, in).prefill[0].second, 64);
  const std::vector<Candidate> alone = {prefilling(2000, Rank::kUrgent)};
  EXPECT_EQ(plan_tick(alone, in).prefill[0].second, 512) << "interactive work is not capped";
}

TEST(Policy, UrgentStreamsDecodeFirstWhenCapacityRunsOut) {
  const std::vector<Candidate> c = {decoding(false, Rank::kRelaxed), decoding(), decoding(false, Rank::kRelaxed), decoding()};
  const TickPlan p = plan_tick(c, {0, /*capacity=*/3, 0, false});
  EXPECT_EQ(p.decode, (std::vector<std::size_t>{0, 1, 3})) << "both urgent, then the first relaxed; batch order kept";
}

TEST(Policy, GuardNamesTheOverdueStream) {
  const std::vector<Candidate> c = {decoding(), decoding(/*overdue=*/true), prefilling(10)};
  const TickPlan p = plan_tick(c, {64, 512, 8, false});
  EXPECT_TRUE(p.guard_fired);
  EXPECT_EQ(p.guard_for, 1u);
}

TEST(Policy, WaitingOrderIsUrgentFirstThenOldest) {
  const Waiting old_bg{Rank::kRelaxed, 5000}, new_bg{Rank::kRelaxed, 10}, new_fg{Rank::kUrgent, 1}, old_fg{Rank::kUrgent, 900};
  std::vector<Waiting> w = {new_bg, old_bg, new_fg, old_fg};
  std::stable_sort(w.begin(), w.end(), waiting_before);
  EXPECT_EQ(w[0].waited_ms, 900);
  EXPECT_EQ(w[1].waited_ms, 1);
  EXPECT_EQ(w[2].waited_ms, 5000);
  EXPECT_EQ(w[3].waited_ms, 10);
}

TEST(Policy, VictimsAreTheMostRecentlyStartedSessionsUntilThereIsRoom) {
  const std::vector<VictimCandidate> running = {{/*cells=*/100, /*running_ms=*/9000}, {50, 20}, {30, 500}};
  EXPECT_EQ(choose_victims(running, 0, 40), (std::vector<std::size_t>{1})) << "one session is enough";
  EXPECT_EQ(choose_victims(running, 0, 60), (std::vector<std::size_t>{1, 2}));
  EXPECT_EQ(choose_victims(running, 1, 0), (std::vector<std::size_t>{1})) << "a sequence id is needed";
  EXPECT_EQ(choose_victims(running, 0, 180), (std::vector<std::size_t>{1, 2, 0}));
  EXPECT_TRUE(choose_victims(running, 0, 181).empty()) << "all of them hold 180: pause nobody";
  EXPECT_TRUE(choose_victims(running, 0, 0).empty()) << "room already";
  // Started in the same clock tick: the later start is the younger (a coarse or virtual clock).
  VictimCandidate first{50, 20}, second{50, 20};
  first.start_order = 7;
  second.start_order = 8;
  EXPECT_EQ(choose_victims(std::vector<VictimCandidate>{second, first}, 1, 0), (std::vector<std::size_t>{0}));
  EXPECT_EQ(choose_victims(std::vector<VictimCandidate>{first, second}, 1, 0), (std::vector<std::size_t>{1}));
}

TEST(Policy, RelaxedWorkGoesFirstAndSessionsPausedOftenGoLast) {
  const std::vector<VictimCandidate> running = {
      {/*cells=*/100, /*running_ms=*/10, Rank::kUrgent, /*protected=*/true},  // youngest, but paused often
      {50, 900, Rank::kUrgent},
      {30, 500, Rank::kRelaxed},
      {40, 20, Rank::kUrgent}};
  EXPECT_EQ(choose_victims(running, 0, 1), (std::vector<std::size_t>{2})) << "background before interactive, whatever its age";
  EXPECT_EQ(choose_victims(running, 0, 31), (std::vector<std::size_t>{2, 3}));
  EXPECT_EQ(choose_victims(running, 0, 71), (std::vector<std::size_t>{2, 3, 1})) << "the protected one only when nothing else does";
  EXPECT_EQ(choose_victims(running, 0, 121), (std::vector<std::size_t>{2, 3, 1, 0}));
}

TEST(Policy, ParkModeSavesWhenCopyingIsCheaperAndItFits) {
  ParkCost c{/*kv_tokens=*/1000, /*kv_bytes=*/23'000'000, /*host_free=*/1u << 30, /*ms_per_token=*/2.0};
  EXPECT_EQ(choose_park_mode(c, ParkPreference::kAuto), ParkMode::kSave) << "23 ms of copying vs 2 s of prefill";
  c.ms_per_prefill_token = 0.001;
  EXPECT_EQ(choose_park_mode(c, ParkPreference::kAuto), ParkMode::kRecompute) << "1 ms of prefill";
  EXPECT_EQ(choose_park_mode(c, ParkPreference::kSave), ParkMode::kSave);
  c.host_bytes_free = 1000;
  EXPECT_EQ(choose_park_mode(c, ParkPreference::kSave), ParkMode::kRecompute) << "over the host cap";
  c = {0, 0, 1u << 30, 2.0};
  EXPECT_EQ(choose_park_mode(c, ParkPreference::kSave), ParkMode::kRecompute) << "nothing to save";
}

// Closed loop: a tick costs base + per_token * (the prefill the budget allowed), like a model would.
double run_ticks(TickBudget& b, int n, std::int32_t streams, double base, double per_token) {
  double tick = 0;
  for (int i = 0; i < n; ++i) {
    tick = base + per_token * b.prefill_budget(streams);
    b.observe(tick, streams, b.prefill_budget(streams), /*prefill_pending=*/true);
  }
  return tick;
}

TEST(TickBudget, SteersPrefillTicksToTwiceTheDecodeOnlyTick) {
  TickBudget b(/*n_batch=*/512, /*target_ms=*/30, /*start=*/64);
  EXPECT_EQ(b.prefill_budget(16), 64) << "conservative until measured";
  for (int i = 0; i < 20; ++i) b.observe(100.0, /*n_decode=*/16, /*n_prefill=*/0);  // steady: 100 ms
  EXPECT_NEAR(b.base_ms(16), 100.0, 1e-6);
  const double tick = run_ticks(b, 60, 16, 100.0, 2.0);  // prefill costs 2 ms per token
  EXPECT_NEAR(tick, 200.0, 10.0);
  EXPECT_NEAR(b.prefill_budget(16), 50, 5);  // (2 * 100 - 100) / 2
  EXPECT_NEAR(b.ms_per_prefill_token(), 2.0, 0.01);
  // The KV grows deeper: every token now costs 4 ms; the budget follows.
  run_ticks(b, 60, 16, 100.0, 4.0);
  EXPECT_NEAR(b.prefill_budget(16), 25, 3);
  // Deeper still: decode alone takes 190 ms; prefill shrinks to the floor instead of growing ticks.
  run_ticks(b, 60, 16, 190.0, 4.0);
  EXPECT_EQ(b.prefill_budget(16), 8);
}

TEST(TickBudget, GrowsToTheBatchWhenTicksAreCheapAndNeverLearnsBaseFromGuardTicks) {
  TickBudget b(/*n_batch=*/256, /*target_ms=*/30, /*start=*/64);
  for (int i = 0; i < 20; ++i) b.observe(5.0, 1, 0);
  run_ticks(b, 40, 1, 5.0, 0.01);
  EXPECT_EQ(b.prefill_budget(1), 256) << "(30 - 5) / 0.01 is beyond n_batch";
  for (int i = 0; i < 20; ++i) b.observe(50.0, 1, 0, /*prefill_pending=*/true);  // guard ticks at depth
  EXPECT_NEAR(b.base_ms(1), 5.0, 1e-6) << "the steady cadence is what the target keeps";
}

TEST(TickBudget, ATickShortOfPrefillWorkDoesNotGrowTheBudget) {
  TickBudget b(512, 30, 64);
  for (int i = 0; i < 20; ++i) b.observe(10.0, 4, 0);
  for (int i = 0; i < 20; ++i) b.observe(12.0, 4, /*n_prefill=*/3, true);  // only 3 tokens were waiting
  EXPECT_EQ(b.prefill_budget(4), 64);
  for (int i = 0; i < 5; ++i) b.observe(80.0, 4, 3, true);  // but a slow one shrinks it
  EXPECT_LT(b.prefill_budget(4), 64);
}

TEST(TickBudget, TheCostModelCapsTheControllersFirstStep) {
  TickBudget b(/*n_batch=*/512, /*target_ms=*/10, /*start=*/64);
  for (int i = 0; i < 20; ++i) b.observe(50.0, 8, 0);             // steady: 50 ms with 8 streams
  for (int i = 0; i < 20; ++i) b.observe(1000.0, 0, 250);         // prefill alone: 4 ms per token
  EXPECT_EQ(b.prefill_budget(8), 12) << "(100 - 50) / 4, not the controller's untested 64";
  EXPECT_EQ(b.tokens_in(150), 37);
}

TEST(TickBudget, AFixedCostPerPrefillTickRaisesTheFloorToAmortiseIt) {
  // GPU-shaped: 64 streams decode in 7 ms; prefill costs 4 ms per tick plus 0.01 ms per token.
  TickBudget b(/*n_batch=*/2048, /*target_ms=*/30, /*start=*/64);
  for (int i = 0; i < 20; ++i) b.observe(7.0, /*n_decode=*/64, 0);
  b.observe(4.0 + 0.01 * 2048, /*n_decode=*/0, 2048);  // the first prompts, nobody decoding yet
  const std::int32_t chunks[] = {8, 170, 64, 8, 120, 8, 40, 170};  // what happened to be waiting
  for (int i = 0; i < 40; ++i) {
    const std::int32_t n = std::min(chunks[i % 8], b.prefill_budget(64));
    b.observe(7.0 + 4.0 + 0.01 * n, 64, n, /*prefill_pending=*/true);
  }
  EXPECT_NEAR(b.prefill_fixed_ms(), 4.0, 0.05);
  EXPECT_NEAR(b.ms_per_prefill_token(), 0.01, 0.001);
  EXPECT_NEAR(b.floor(), 400, 10) << "4 ms of fixed cost is 400 tokens' work";
  EXPECT_GE(b.prefill_budget(64), 400);
  EXPECT_EQ(b.tokens_in(150), 2048) << "(150 - 4) / 0.01, capped by the batch";
  // Ticks over the target (here: a deeper KV that no decode-only tick has measured yet) shrink
  // the controller's budget, but not below the floor.
  for (int i = 0; i < 40; ++i) b.observe(60.0, 64, b.prefill_budget(64), true);
  EXPECT_EQ(b.prefill_budget(64), b.floor());
  EXPECT_NEAR(b.floor(), 400, 10) << "a stale base says nothing about the fixed cost";
}

TEST(TickBudget, WithoutAFixedCostTheFloorStaysTheConfiguredOne) {
  // CPU-shaped: prefill tokens ride in the decode's pass; their cost is proportional.
  TickBudget b(/*n_batch=*/512, /*target_ms=*/30, /*start=*/64);
  for (int i = 0; i < 20; ++i) b.observe(100.0, 8, 0);
  b.observe(512 * 3.0 + 40.0, 0, 512);  // alone, a pass of its own
  const std::int32_t chunks[] = {8, 40, 20, 8, 33};
  for (int i = 0; i < 40; ++i) {
    const std::int32_t n = std::min(chunks[i % 5], b.prefill_budget(8));
    b.observe(100.0 + 3.0 * n, 8, n, true);
  }
  EXPECT_EQ(b.prefill_fixed_ms(), 0.0);
  EXPECT_EQ(b.floor(), 8);
  EXPECT_NEAR(b.prefill_budget(8), 33, 1) << "(2 * 100 - 100) / 3";
}

TEST(TickBudget, TheDecodeOnlyTickIsLearnedPerStreamCount) {
  TickBudget b(/*n_batch=*/512, /*target_ms=*/10, /*start=*/64);
  for (int i = 0; i < 50; ++i) {
    b.observe(16.0, /*n_decode=*/1, 0);
    b.observe(72.0, /*n_decode=*/8, 0);
  }
  EXPECT_NEAR(b.base_ms(1), 16.0, 1e-6);
  EXPECT_NEAR(b.base_ms(8), 72.0, 1e-6);
  EXPECT_NEAR(b.base_ms(4), 64.0, 1e-6) << "not seen: 1 stream's tick scaled by 4";
  EXPECT_NEAR(b.base_ms(12), 108.0, 1e-6) << "not seen: 8 streams' tick scaled by 12/8";
  EXPECT_NEAR(b.target_ms(8), 144.0, 1e-6);
  EXPECT_NEAR(b.target_ms(1), 32.0, 1e-6);
}

// The calibration ran while a neighbour held the cores: 21.5 ms a prompt token and 1374 ms fixed,
// where serving then costs 1.15 ms and nothing fixed. The serving ticks replace it within a second.
TEST(TickBudget, ACalibrationTakenBesideANeighboursBurstIsReplacedByTheServingTicks) {
  TickBudget b(/*n_batch=*/512, /*target_ms=*/40, /*start=*/64);
  for (std::int32_t n : {64, 64, 256, 16, 32, 64, 128}) b.observe_prefill(1374.0 + 21.5 * n, n);
  ASSERT_GT(b.prefill_fixed_ms(), 1000.0);
  for (int i = 0; i < 10; ++i) b.observe(20.0, /*n_decode=*/4, 0);
  const std::int32_t chunks[] = {16, 40, 24, 16, 64};
  for (int i = 0; i < 40; ++i) {  // 40 ticks of 20-95 ms
    const std::int32_t n = std::min(chunks[i % 5], b.prefill_budget(4));
    b.observe(20.0 + 1.15 * n, 4, n, /*prefill_pending=*/true);
    if (i % 4 == 3) b.observe(20.0, 4, 0);  // the decode-only base stays fresh
  }
  EXPECT_LT(b.prefill_fixed_ms(), 2.0);
  EXPECT_NEAR(b.ms_per_prefill_token(), 1.15, 0.1);
  EXPECT_NEAR(b.prefill_budget(4), 17, 2) << "(2 * 20 - 20) / 1.15";
}

TEST(TickBudget, OneSlowTickMovesTheAveragesByABoundedStep) {
  TickBudget b(512, 30, 64);
  for (int i = 0; i < 20; ++i) b.observe(10.0, 4, 0);
  b.observe(1000.0, 4, 0);  // a neighbour's burst
  EXPECT_LE(b.base_ms(4), 10.0 * (0.8 + 0.2 * 4.0) + 1e-9);
  for (int i = 0; i < 20; ++i) b.observe(10.0, 4, 0);
  EXPECT_NEAR(b.base_ms(4), 10.0, 0.1);
}


// A CPU-like tick: 60 ms for 16 decode rows, 1.7 ms per prompt token.
double cpu_tick(std::int32_t p) { return 60.0 + 1.7 * p; }

TEST(SloBudget, NoPromptMeansNoBudget) {
  SloBudgetInput in{cpu_tick, 0.0, 80.0, {}, 8, 512};
  EXPECT_EQ(slo_prefill_budget(in).tokens, 0);
}

TEST(SloBudget, WithNoStreamsAPromptGoesInWhole) {
  const std::vector<PromptWait> w = {{0.0, 300, 600.0}};
  SloBudgetInput in{cpu_tick, 0.0, /*tbt_target_ms=*/0.0, w, 8, 512};
  EXPECT_EQ(slo_prefill_budget(in).tokens, 300);
}

TEST(SloBudget, BalancesTheStreamsGapAgainstTheWaitingPromptsTtft) {
  // A long prompt (target 1.5 s on top of its ~3.4 s alone) beside streams with an 80 ms target.
  const std::vector<PromptWait> w = {{0.0, 2000, 3550.0}};
  SloBudgetInput in{[](std::int32_t p) { return 45.0 + 1.7 * p; }, 0.0, 80.0, w, 8, 2000};
  const SloBudget b = slo_prefill_budget(in);
  EXPECT_GT(b.tokens, 8);     // the prompt is not starved to the floor
  EXPECT_LT(b.tokens, 2000);  // nor are the streams stalled for the whole prompt
  EXPECT_NEAR(b.stream_ratio, b.prompt_ratio, 0.25 * b.stream_ratio);
  // The longer the prompt has waited, the more it gets.
  const std::vector<PromptWait> late = {{3000.0, 1000, 3550.0}};
  SloBudgetInput later = in;
  later.prompts = late;
  EXPECT_GT(slo_prefill_budget(later).tokens, b.tokens);
}

TEST(SloBudget, AStreamAlreadyLateDoesNotStopAPromptThatIsLater) {
  const std::vector<PromptWait> w = {{2000.0, 128, 400.0}};  // 5x its target already
  SloBudgetInput in{cpu_tick, /*stream_waited_ms=*/100.0, 80.0, w, 8, 512};
  EXPECT_EQ(slo_prefill_budget(in).tokens, 128);
}

TEST(SloBudget, ATieGoesToTheFullerTick) {
  // Flat cost: every p predicts the same tick, so the prompt ratio falls with p and the stream's stays.
  const std::vector<PromptWait> w = {{0.0, 64, 1e6}};
  SloBudgetInput in{[](std::int32_t) { return 50.0; }, 0.0, 80.0, w, 8, 512};
  EXPECT_EQ(slo_prefill_budget(in).tokens, 64);
}

TEST(SloBudget, WithFillEveryChunkThatMeetsAllTargetsTiesAndTheFullestWins) {
  // 10 ms + 0.1 ms a token; the streams' target 80 ms; a 2000-token prompt with a loose target.
  const std::vector<PromptWait> w = {{0.0, 2000, 2000.0}};
  SloBudgetInput in{[](std::int32_t p) { return 10.0 + 0.1 * p; }, 0.0, 80.0, w, 8, 2000};
  const SloBudget balanced = slo_prefill_budget(in);
  in.fill_when_met = true;
  const SloBudget filled = slo_prefill_budget(in);
  EXPECT_GT(filled.tokens, balanced.tokens);
  EXPECT_LE(filled.stream_ratio, 1.0);
  EXPECT_GT(filled.stream_ratio, 0.9) << "the tick as long as the streams' target allows (within the 8% grid)";
  EXPECT_LE(filled.prompt_ratio, 1.0);
  // A target that cannot be met: the same choice as without fill (the least worst ratio).
  const std::vector<PromptWait> late = {{5000.0, 2000, 2000.0}};
  in.prompts = late;
  const SloBudget late_filled = slo_prefill_budget(in);
  in.fill_when_met = false;
  EXPECT_EQ(late_filled.tokens, slo_prefill_budget(in).tokens);
}

TEST(SloBudget, PromptsLaterInLineCountTheirWaitBehindTheOnesAhead) {
  // Two prompts: the second's TTFT includes the first's tokens; the floor and capacity hold.
  const std::vector<PromptWait> w = {{0.0, 100, 1e6}, {500.0, 100, 600.0}};
  SloBudgetInput in{cpu_tick, 0.0, 80.0, w, 8, 150};
  const SloBudget b = slo_prefill_budget(in);
  EXPECT_GE(b.tokens, 8);
  EXPECT_LE(b.tokens, 150);
  EXPECT_GT(b.prompt_ratio, 0.0);
}


TEST(Policy, TheGatherWindowIsAShareOfAPrefillOnlyTickAndNoneWhileAnyoneDecodes) {
  EXPECT_DOUBLE_EQ(gather_window_ms(false, 330.0, 5.0), 3.3);   // a 330 ms prompt tick: 3.3 ms
  EXPECT_DOUBLE_EQ(gather_window_ms(false, 5000.0, 5.0), 5.0);  // capped
  EXPECT_DOUBLE_EQ(gather_window_ms(false, 4.0, 5.0), 0.04);    // a GPU's short tick: 40 us
  EXPECT_EQ(gather_window_ms(true, 330.0, 5.0), 0.0);           // a stream would wait too
  EXPECT_EQ(gather_window_ms(false, 0.0, 5.0), 0.0);            // the tick's time is not known
  EXPECT_EQ(gather_window_ms(false, 330.0, 0.0), 0.0);          // --gather-ms 0
}

}  // namespace
}  // namespace uma
