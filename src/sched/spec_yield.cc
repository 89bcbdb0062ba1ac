#include "sched/spec_yield.h"

#include <algorithm>
#include <limits>

#include "common/bucketed_ewma.h"

namespace uma {

std::size_t SpecYieldGuard::bucket_of(std::size_t rows) { return BucketedEwma::bucket_of(rows); }

int SpecYieldGuard::arm_of(std::int32_t draft_rows) {
  int a = -1;
  while (draft_rows > 0) draft_rows >>= 1, ++a;
  return std::min(a, kArms - 1);
}

int SpecYieldGuard::best_arm(const Bucket& y, int min_samples) {
  int best = -1;
  for (int a = 0; a < kArms; ++a) {
    const Rate& arm = y.arms[static_cast<std::size_t>(a)];
    if (arm.n >= min_samples && (best < 0 || arm.value() > y.arms[static_cast<std::size_t>(best)].value())) best = a;
  }
  return best;
}

int SpecYieldGuard::n_spec(const Bucket& y) {
  int n = 0;
  for (const Rate& a : y.arms) n += a.n;
  return n;
}

bool SpecYieldGuard::loses(const Bucket& y, double spec_rate) {
  const int n = n_spec(y);
  if (y.plain.n < kSamples || n == 0 || !(spec_rate < y.plain.value())) return false;
  return n >= kLoseSamples || spec_rate < kDecisiveLoss * y.plain.value();
}

const SpecYieldGuard::Bucket* SpecYieldGuard::find(std::size_t decode_rows) const {
  const std::size_t b = bucket_of(decode_rows);
  return b < buckets_.size() ? &buckets_[b] : nullptr;
}

void SpecYieldGuard::observe(std::size_t decode_rows, std::int32_t draft_rows, double tokens, double ms) {
  if (decode_rows == 0 || !(ms > 0)) return;
  const std::size_t b = bucket_of(decode_rows);
  if (buckets_.size() <= b) buckets_.resize(b + 1);
  Bucket& y = buckets_[b];
  if (draft_rows > 0 && y.plain.n >= kSamples && tokens / ms >= y.plain.value()) y.probe_every = kProbeFirst;  // a probe that won
  if (draft_rows > 0) {
    y.probe.sampled();
    if (arm_of(draft_rows) == y.explore_arm) {
      y.explore.sampled();
      if (y.explore_from >= 0) y.fresh.add(tokens, ms, 1.0);
    }
    y.arms[static_cast<std::size_t>(arm_of(draft_rows))].add(tokens, ms, 0.95);
  } else {
    y.plain.add(tokens, ms, 0.8);
  }
}

bool SpecYieldGuard::allows(std::size_t decode_rows) {
  const std::size_t b = bucket_of(decode_rows);
  const bool plain_first = plain_first_ && decode_rows >= kPlainFirstRows;
  if (b >= buckets_.size()) return !plain_first;
  Bucket& y = buckets_[b];
  if (y.probe.next()) return true;
  if (plain_first && y.plain.n == 0) return false;
  const int best = best_arm(y);
  if (best < 0 && n_spec(y) < kSamples) return true;  // verifying ticks measured first
  if (y.plain.n < kSamples) return false;             // then plain ones, to compare with
  if (!loses(y, spec_rate(decode_rows))) {
    y.probe_every = kProbeFirst;
    if (++y.since_probe <= kPlainEvery) return true;
    // A run of plain ticks now and then: where ticks are pipelined, all but its first are.
    if (y.since_probe == kPlainEvery + kPlainRun) y.since_probe = 0;
    return false;
  }
  // Losing: an untried arm below the leader first (max_draft_rows caps the tick to it).
  if (const int lead = best_arm(y, 1); best < 0 && lead > 0 && y.arms[static_cast<std::size_t>(lead - 1)].n == 0) return true;
  if (++y.since_probe < y.probe_every) return false;
  y.since_probe = 0;
  y.probe_every = std::min(2 * y.probe_every, kProbeLast);
  y.probe.start(kProbeSamples);
  return true;
}

std::int32_t SpecYieldGuard::max_draft_rows(std::size_t decode_rows) {
  const std::size_t b = bucket_of(decode_rows);
  if (buckets_.size() <= b) buckets_.resize(b + 1);
  Bucket& y = buckets_[b];
  y.trial = -1;
  y.exploring = y.explore.next();
  if (y.exploring) return top_of(y.explore_arm);
  if (y.explore_from >= 0) {  // an exploration ended
    // Its samples replace the arm's older ones where they beat the best arm clearly (two samples
    // vary with what was accepted): those are stale (the acceptance moved), and a few new samples
    // hardly move a decayed sum of many.
    Rate& arm = y.arms[static_cast<std::size_t>(y.explore_arm)];
    if (y.fresh.n > 0 && y.fresh.value() > kExploreWin * y.arms[static_cast<std::size_t>(y.explore_from)].value()) {
      arm = Rate{y.fresh.tokens, y.fresh.ms, std::max(arm.n, kArmSamples)};
    }
    // One that moved nothing: the next comes twice as far.
    y.explore_every = best_arm(y) == y.explore_from ? std::min(2 * y.explore_every, kExploreLast) : kExploreEvery;
    y.explore_from = -1;
  }
  int best = best_arm(y);
  if (best < 0) {
    // Before any arm has its samples (and once plain ticks are measured): the arm leading so far,
    // or where it loses to plain ticks its lower neighbour once (fewer rows cost less: a bucket's
    // first verifying ticks carry all the rows the plan picks).
    const int lead = best_arm(y, 1);
    if (lead < 0 && y.pinned >= 0) return top_of(y.pinned);
    if (lead < 0 || y.plain.n < kSamples) return std::numeric_limits<std::int32_t>::max();
    const bool losing = y.arms[static_cast<std::size_t>(lead)].value() < y.plain.value();
    if (!(losing && lead > 0 && y.arms[static_cast<std::size_t>(lead - 1)].n == 0)) return top_of(lead);
    y.trial = lead - 1;
    return top_of(y.trial);
  }
  const int lower = best - 1, upper = best + 1;
  if (lower >= 0 && y.arms[static_cast<std::size_t>(lower)].n < kArmSamples) {
    y.trial = lower;
    return top_of(lower);
  }
  if (++y.since_explore >= y.explore_every) {
    y.since_explore = 0;
    y.explore_up = !y.explore_up;
    const int arm = y.explore_up ? upper : lower;
    if (arm >= 0 && arm < kArms) {
      const int n = y.arms[static_cast<std::size_t>(arm)].n;
      y.explore_arm = arm;
      y.explore_from = best;
      y.fresh = Rate{};
      y.explore.start(std::min(std::max(kProbeSamples, kArmSamples - n), kProbeTicks - 2));
      y.exploring = true;
      return top_of(arm);
    }
  }
  return top_of(best);
}

void SpecYieldGuard::declined_under_cap(std::size_t decode_rows) {
  const std::size_t b = bucket_of(decode_rows);
  if (b >= buckets_.size() || buckets_[b].trial < 0) return;
  Bucket& y = buckets_[b];
  // As many samples as an arm needs to count, at plain's rate (none measured yet: nothing verified).
  y.arms[static_cast<std::size_t>(y.trial)] = Rate{y.plain.tokens, y.plain.ms > 0 ? y.plain.ms : 1.0, kArmSamples};
  y.trial = -1;
}

void SpecYieldGuard::pin(std::size_t decode_rows, std::int32_t draft_rows) {
  const std::size_t b = bucket_of(decode_rows);
  if (draft_rows <= 0) return;
  if (buckets_.size() <= b) buckets_.resize(b + 1);
  if (buckets_[b].pinned < 0) buckets_[b].pinned = arm_of(draft_rows);
}

std::int32_t SpecYieldGuard::steady_rows(std::size_t decode_rows) const {
  const Bucket* y = find(decode_rows);
  if (y == nullptr) return 0;
  if (y->exploring) return top_of(y->explore_arm);
  int arm = best_arm(*y);
  if (arm < 0) arm = best_arm(*y, 1);
  if (arm < 0) arm = y->pinned;
  return arm >= 0 ? top_of(arm) : 0;
}

bool SpecYieldGuard::verifying_wins(std::size_t decode_rows) const {
  const Bucket* y = find(decode_rows);
  if (y == nullptr || y->plain.n < kSamples) return false;
  const int best = best_arm(*y);
  return best >= 0 && y->arms[static_cast<std::size_t>(best)].value() > y->plain.value();
}

bool SpecYieldGuard::verifying_loses(std::size_t decode_rows) const {
  const Bucket* y = find(decode_rows);
  return y != nullptr && loses(*y, spec_rate(decode_rows));
}

double SpecYieldGuard::plain_rate(std::size_t decode_rows) const {
  const Bucket* y = find(decode_rows);
  return y != nullptr ? y->plain.value() : 0.0;
}

double SpecYieldGuard::spec_rate(std::size_t decode_rows) const {
  const Bucket* y = find(decode_rows);
  if (y == nullptr) return 0.0;
  int best = best_arm(*y);
  if (best < 0) best = best_arm(*y, 1);  // before any arm has enough samples: the best seen
  return best >= 0 ? y->arms[static_cast<std::size_t>(best)].value() : 0.0;
}

}  // namespace uma
