// The online TTFT fit against synthetic agents whose true cost is known.
#include "gateway/ttft_fit.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

namespace uma::gateway {
namespace {

TEST(TtftFit, BeforeAnySampleItIsThePrior) {
  const TtftCoefficients prior{0.0, 0.001, 0.001, 0.0};
  const TtftCoefficients c = TtftFit().coefficients(prior);
  EXPECT_DOUBLE_EQ(c.per_uncached_s, 0.001);
  EXPECT_DOUBLE_EQ(c.predict(1000, 500), 1.5);
}

// An agent four times slower than its beat says, with 80 ms per request the beat knows nothing of
// and 30 ms more for each request running beside: the fit finds them from mixed cold and warm
// requests with queues; the slopes within 5-10%, the fixed cost (the least determined, with ~33
// samples' worth of memory and 10 ms of noise) within 40 ms, the prediction within a few percent.
TEST(TtftFit, FindsTheAgentsRealCostsFromItsMeasurements) {
  const TtftCoefficients prior{0.0, 0.001, 0.001, 0.0};
  const TtftCoefficients truth{0.080, 0.004, 0.002, 0.030};
  TtftFit fit;
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> tokens(0, 3000);
  std::normal_distribution<double> noise(0.0, 0.01);
  for (int i = 0; i < 200; ++i) {
    const double uncached = i % 3 == 0 ? tokens(rng) : 30;  // a cold prompt now and then, else a turn
    const double ahead = tokens(rng) / 2;
    const double running = i % 4;
    fit.observe(uncached, ahead, running, truth.predict(uncached, ahead, running) + noise(rng));
  }
  const TtftCoefficients c = fit.coefficients(prior);
  EXPECT_NEAR(c.fixed_s, 0.080, 0.040);
  EXPECT_NEAR(c.per_uncached_s, 0.004, 0.0002);
  EXPECT_NEAR(c.per_ahead_s, 0.002, 0.0002);
  EXPECT_NEAR(c.per_running_s, 0.030, 0.010);
  EXPECT_NEAR(c.predict(2000, 1000, 2) / truth.predict(2000, 1000, 2), 1.0, 0.03);
}

// Only cache hits with empty queues so far: nothing says what a cold prompt or a queue costs, so
// those slopes stay near the prior's instead of being fitted to noise (or going negative).
TEST(TtftFit, AFeatureThatNeverVariedKeepsThePriorsSlope) {
  const TtftCoefficients prior{0.0, 0.001, 0.001, 0.0};
  TtftFit fit;
  for (int i = 0; i < 100; ++i) fit.observe(30, 0, 0, 0.050 + (i % 2 ? 0.005 : -0.005));
  const TtftCoefficients c = fit.coefficients(prior);
  EXPECT_NEAR(c.predict(30, 0), 0.050, 0.005) << "what it has seen, it predicts";
  EXPECT_NEAR(c.per_uncached_s, 0.001, 0.0005);
  EXPECT_NEAR(c.per_ahead_s, 0.001, 0.0002);
}

// Cache hits are most requests and cost a few hundred ms; now and then a cold prompt costs seconds,
// with a scatter (cores shared with other work) larger than a hit's whole time, and a hit sometimes
// waits behind one. Fitted on absolute seconds, each cold prompt's scatter would drag the fixed cost
// and the slopes, and the hits (the median request) would be mispredicted; weighted by 1 / measured,
// the fit keeps the hits right. Predictions are scored online, as the gateway uses them (fitted
// unweighted, this same sequence gives a median bias of +2.7% and a median error of 9.2%).
TEST(TtftFit, HitsArePredictedRelativelyWellBesideScatteredColdPrompts) {
  const TtftCoefficients prior{0.0, 0.004, 0.004, 0.0};
  TtftFit fit;
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> scatter(0.5, 2.0);
  std::uniform_real_distribution<double> jitter(0.9, 1.1);
  std::uniform_int_distribution<int> cold_tokens(800, 1200), turn_tokens(30, 60), ahead_tokens(0, 400);
  std::vector<double> hit_errors;
  for (int i = 0; i < 400; ++i) {
    double uncached, ahead = 0, measured;
    if (i % 6 == 0) {
      uncached = cold_tokens(rng);
      measured = (0.050 + 0.0055 * uncached) * scatter(rng);
    } else {
      uncached = turn_tokens(rng);
      if (i % 3 == 0) ahead = ahead_tokens(rng);
      measured = (0.250 + 0.002 * uncached + 0.0055 * ahead) * jitter(rng);
    }
    if (i >= 100 && i % 6 != 0) hit_errors.push_back(fit.coefficients(prior).predict(uncached, ahead, 0) / measured - 1);
    fit.observe(uncached, ahead, 0, measured);
  }
  const auto median = [](std::vector<double> v) {
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    return v[v.size() / 2];
  };
  std::vector<double> abs_errors;
  for (double e : hit_errors) abs_errors.push_back(std::abs(e));
  EXPECT_LT(std::abs(median(hit_errors)), 0.02) << "the median hit's bias";
  EXPECT_LT(median(abs_errors), 0.085) << "the median hit's prediction error";
}

// One agent, one request at a time (measured: the cluster bench with 1 agent, c=1): `running` is 1
// in every sample but the first, so it and the fixed cost share the same samples, and the first
// cold prompt, measured faster than the rest, puts the fixed cost unconstrained below zero with
// `running` making up for it. Clamping the fixed cost to 0 afterwards kept `running`'s offset and
// predicted every ~340 ms hit at 0.7-1.4 s (median error 2.15 in that run); a coefficient at its
// bound must leave the others solved without it (with the clamp this predicts the hit at 1.77x).
TEST(TtftFit, ABoundReachedLeavesTheOtherCoefficientsFittedWithoutIt) {
  const TtftCoefficients prior{0.0, 0.0036, 0.0036, 0.0};
  TtftFit fit;
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> jitter(0.9, 1.1);
  fit.observe(1000, 0, 0, 4.35);  // the first request: nothing running beside it
  for (int i = 1; i < 60; ++i) {
    const bool cold = i < 8 || i % 12 == 0;
    const double uncached = cold ? 1000 : 39;
    fit.observe(uncached, 0, 1, (0.055 + 0.0058 * uncached) * jitter(rng));
  }
  const TtftCoefficients c = fit.coefficients(prior);
  EXPECT_GE(c.fixed_s, 0.0);
  EXPECT_NEAR(c.predict(39, 0, 1) / (0.055 + 0.0058 * 39), 1.0, 0.15) << "a cache hit";
  EXPECT_NEAR(c.predict(1000, 0, 1) / (0.055 + 0.0058 * 1000), 1.0, 0.15) << "a cold prompt";
}

TEST(TtftFit, ItForgetsAnAgentThatGotFaster) {
  const TtftCoefficients prior{0.0, 0.001, 0.001, 0.0};
  TtftFit fit;
  for (int i = 0; i < 100; ++i) fit.observe(1000 + 10 * (i % 7), 200 * (i % 5), 0, 4.0e-3 * (1000 + 10 * (i % 7)));
  for (int i = 0; i < 150; ++i) fit.observe(1000 + 10 * (i % 7), 200 * (i % 5), 0, 1.0e-3 * (1000 + 10 * (i % 7)));
  EXPECT_NEAR(fit.coefficients(prior).predict(1000, 0), 1.0, 0.1);
}

TEST(TtftFit, NonsenseMeasurementsAreIgnored) {
  TtftFit fit;
  fit.observe(10, 10, 0, -1.0);
  fit.observe(10, 10, 0, std::nan(""));
  EXPECT_EQ(fit.samples(), 0u);
}

}  // namespace
}  // namespace uma::gateway
