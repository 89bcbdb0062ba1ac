// The online TTFT fit against synthetic agents whose true cost is known.
#include "cluster/ttft_fit.h"

#include <gtest/gtest.h>

#include <random>

namespace uma::cluster {
namespace {

TEST(TtftFit, BeforeAnySampleItIsThePrior) {
  const TtftCoefficients prior{0.0, 0.001, 0.001};
  const TtftCoefficients c = TtftFit().coefficients(prior);
  EXPECT_DOUBLE_EQ(c.per_uncached_s, 0.001);
  EXPECT_DOUBLE_EQ(c.predict(1000, 500), 1.5);
}

// An agent four times slower than its beat says, with 80 ms per request the beat knows nothing of:
// the fit finds both from mixed cold and warm requests with queues, within a few percent.
TEST(TtftFit, FindsTheAgentsRealCostsFromItsMeasurements) {
  const TtftCoefficients prior{0.0, 0.001, 0.001};
  const TtftCoefficients truth{0.080, 0.004, 0.002};
  TtftFit fit;
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> tokens(0, 3000);
  std::normal_distribution<double> noise(0.0, 0.01);
  for (int i = 0; i < 200; ++i) {
    const double uncached = i % 3 == 0 ? tokens(rng) : 30;  // a cold prompt now and then, else a turn
    const double ahead = tokens(rng) / 2;
    fit.observe(uncached, ahead, truth.predict(uncached, ahead) + noise(rng));
  }
  const TtftCoefficients c = fit.coefficients(prior);
  EXPECT_NEAR(c.fixed_s, 0.080, 0.025);
  EXPECT_NEAR(c.per_uncached_s, 0.004, 0.0002);
  EXPECT_NEAR(c.per_ahead_s, 0.002, 0.0002);
  EXPECT_NEAR(c.predict(2000, 1000) / truth.predict(2000, 1000), 1.0, 0.03);
}

// Only cache hits with empty queues so far: nothing says what a cold prompt or a queue costs, so
// those slopes stay near the prior's instead of being fitted to noise (or going negative).
TEST(TtftFit, AFeatureThatNeverVariedKeepsThePriorsSlope) {
  const TtftCoefficients prior{0.0, 0.001, 0.001};
  TtftFit fit;
  for (int i = 0; i < 100; ++i) fit.observe(30, 0, 0.050 + (i % 2 ? 0.005 : -0.005));
  const TtftCoefficients c = fit.coefficients(prior);
  EXPECT_NEAR(c.predict(30, 0), 0.050, 0.005) << "what it has seen, it predicts";
  EXPECT_NEAR(c.per_uncached_s, 0.001, 0.0005);
  EXPECT_NEAR(c.per_ahead_s, 0.001, 0.0002);
}

TEST(TtftFit, ItForgetsAnAgentThatGotFaster) {
  const TtftCoefficients prior{0.0, 0.001, 0.001};
  TtftFit fit;
  for (int i = 0; i < 100; ++i) fit.observe(1000 + 10 * (i % 7), 200 * (i % 5), 4.0e-3 * (1000 + 10 * (i % 7)));
  for (int i = 0; i < 150; ++i) fit.observe(1000 + 10 * (i % 7), 200 * (i % 5), 1.0e-3 * (1000 + 10 * (i % 7)));
  EXPECT_NEAR(fit.coefficients(prior).predict(1000, 0), 1.0, 0.1);
}

TEST(TtftFit, NonsenseMeasurementsAreIgnored) {
  TtftFit fit;
  fit.observe(10, 10, -1.0);
  fit.observe(10, 10, std::nan(""));
  EXPECT_EQ(fit.samples(), 0u);
}

}  // namespace
}  // namespace uma::cluster
