// SpecYieldGuard: what speculation really yields, and how many draft rows a tick should carry.
//
// plan_drafts (sched/speculation.h) predicts from the cost model, which can be wrong where rows
// take a shape it never saw: a GPU verifying K+1 rows runs without the CUDA graph a one-row decode
// replays (launch-bound), a draft model's call costs launches and a catch-up. So the yield that
// counts is measured: tokens per ms of decode-only ticks, their drafting included, kept by decode
// rows (1, 2-3, 4-7, ...: streams that end one by one stay in a bucket), plain ticks apart from
// verifying ones, and verifying ones by their draft rows (arms: 1, 2-3, 4-7, ..., 64-127).
//   allows          drafts only while the best arm out-yields plain ticks. Where it does not,
//                   declined ticks verify anyway now and then (a probe), kProbeFirst ticks apart,
//                   twice as far after each probe that lost, up to kProbeLast; a probe that wins
//                   brings the spacing back. Verifying loses only on evidence: kLoseSamples
//                   verifying samples, or fewer that yield under half of plain's rate (a tick's
//                   tokens run from 1 to K + 1, so three samples mislead: on a GPU a lone
//                   stream whose steady ticks yield 1.5x plain read 0.94x on its first three and
//                   spent 70 of its 300 ticks plain). A probe is a run of verifying ticks that
//                   lasts until kProbeSamples of them were observed: where ticks are pipelined the scheduler
//                   samples neither the first two verifying ticks of a shape nor the first plain
//                   one after them (a GPU runs a new shape without a graph, then captures it), so
//                   a lone probe would measure only that. Where drafts win, kPlainRun ticks in
//                   kPlainEvery stay plain.
//   max_draft_rows  the top of the best arm: a hill climb over arms, its lower neighbour tried
//                   first (fewer rows cost less), then each neighbour now and then: an
//                   exploration, a run like a probe's, until the neighbour has kArmSamples
//                   samples (kProbeSamples more once it has) or kProbeTicks ticks passed (a lone
//                   tick of a new shape is no sample where ticks are pipelined: on a GPU a lone
//                   stream settled on 1 draft row, 0.40 tok/ms, and never measured 3 again, which
//                   yielded 0.47 in another run). Explorations come kExploreEvery verifying ticks
//                   apart, twice as far after each that left the best arm as it was, up to
//                   kExploreLast (on a GPU a lone stream's 7-row explorations, 6.4-9 ms for
//                   2.5-4 tokens against 5.4 ms for 2.9 at 3 rows, were 9-15 of a request's 85
//                   ticks); one that moves it brings the spacing back. Where an exploration's own
//                   samples beat the best arm by kExploreWin they replace the explored arm's
//                   older ones, which a few new samples would hardly move (the acceptance moved).
// Pure: numbers in, numbers out; tested on synthetic yields. Not thread-safe (the compute thread's).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace uma {

class SpecYieldGuard {
 public:
  // Samples of plain ticks, and of an arm, before they are compared: a verifying tick's tokens
  // vary from 1 to K + 1 with what is accepted, a plain tick's do not.
  static constexpr int kSamples = 3;
  static constexpr int kArmSamples = 6;
  // Verifying samples (all arms) before verifying may be judged to lose, unless it yields under
  // kDecisiveLoss of plain's rate.
  static constexpr int kLoseSamples = 8;
  static constexpr double kDecisiveLoss = 0.5;
  static constexpr int kProbeFirst = 32;
  static constexpr int kProbeLast = 512;
  // A probe's run: until this many verifying samples came, and at most kProbeTicks ticks (ticks
  // that are no samples, such as those carrying a prompt, do not make it run on).
  static constexpr int kProbeSamples = 2;
  static constexpr int kProbeTicks = 8;
  // Verifying ticks between two tries of a neighbour arm, and between two plain ticks where
  // verifying wins: each is a tick of another shape, which a GPU captures as a new graph.
  static constexpr int kExploreEvery = 64;
  static constexpr int kExploreLast = 512;
  static constexpr double kExploreWin = 1.1;
  static constexpr int kPlainEvery = 64;
  static constexpr int kPlainRun = 3;
  static constexpr int kArms = 7;

  // Where a decode of any shape costs alike (a CPU: no graphs captured), a bucket of at least
  // kPlainFirstRows rows measures a plain tick before any verifying one: the scheduler caps a
  // verifying tick's rows from a measured plain tick, where the cost model can be far off (right
  // after prompts at 16 streams on a CPU it predicted 147 ms for a 70 ms tick, and a first
  // verifying tick took 52 draft rows, 290 ms). Fewer rows verify at once (a lone stream's drafts
  // from the prompt or a client's prediction are worth most on its first ticks).
  static constexpr std::size_t kPlainFirstRows = 4;
  void set_plain_first(bool on) { plain_first_ = on; }
  // A decode-only tick of `decode_rows` rows and `draft_rows` verified draft rows (0: plain) that
  // yielded `tokens` in `ms`, drafting included.
  void observe(std::size_t decode_rows, std::int32_t draft_rows, double tokens, double ms);
  // Whether a tick of `decode_rows` rows whose plan has drafts may verify them (counts the tick).
  bool allows(std::size_t decode_rows);
  // Most draft rows a verifying tick of `decode_rows` rows should carry now (counts the tick).
  std::int32_t max_draft_rows(std::size_t decode_rows);
  // The plan of a tick of `decode_rows` rows was declined under the cap max_draft_rows last gave.
  // Where that cap was a lower arm's first trial, the arm counts as yielding what plain ticks do:
  // capped there, ticks are plain. An arm no plan can fill (at 64 streams drafting alike, fewer
  // than 64 rows are no plan) is otherwise never sampled, and its trial holds every tick to it.
  void declined_under_cap(std::size_t decode_rows);
  // Where a decode's shape costs (a GPU's graphs): the first plan's `draft_rows` pins the arm a
  // bucket is measured at until an arm has samples, so verifying ticks keep one shape (the
  // scheduler samples one from the third of its shape); without it the plan's rows follow the
  // acceptance tick by tick and no shape repeats. No effect once the bucket has a pinned arm.
  void pin(std::size_t decode_rows, std::int32_t draft_rows);
  // The bucket of `decode_rows` rows: 1 for one, 2 for 2-3, 3 for 4-7, ... (0 for none), as the
  // costs the scheduler keeps by rows (common/bucketed_ewma.h).
  static std::size_t bucket_of(std::size_t decode_rows);
  // Draft rows a verifying tick should have where a new shape costs (the plan fills to them, not a
  // cap): the top of the arm the last max_draft_rows explores, else of the best arm, else of the
  // one leading so far, else of the pinned one; 0 before any of them.
  std::int32_t steady_rows(std::size_t decode_rows) const;
  // Whether verifying ticks were measured to out-yield plain ones in `decode_rows`' bucket (an arm
  // with kArmSamples samples against kSamples plain ones).
  bool verifying_wins(std::size_t decode_rows) const;
  // Whether verifying ticks were measured to yield less than plain ones there (any arm's samples
  // against kSamples plain ones): a verifying tick now is a probe.
  bool verifying_loses(std::size_t decode_rows) const;
  // Tokens per ms measured (0 before any sample): plain ticks, and the best verifying arm.
  double plain_rate(std::size_t decode_rows) const;
  double spec_rate(std::size_t decode_rows) const;

 private:
  // Tokens over ms of the recent samples (each older one weighs `decay` less): time-weighted,
  // so a lucky short tick does not outweigh a long one.
  struct Rate {
    double tokens = 0, ms = 0;
    int n = 0;
    void add(double t, double m, double decay) { tokens = decay * tokens + t, ms = decay * ms + m, ++n; }
    double value() const { return ms > 0 ? tokens / ms : 0.0; }
  };
  // A probe's or an exploration's run of verifying ticks: samples still to come, and ticks left
  // for them (kProbeTicks from its start).
  struct Run {
    int samples = 0, ticks = 0;
    void start(int n) { samples = n, ticks = kProbeTicks - 1; }
    bool next() { return samples > 0 && ticks > 0 && (--ticks, true); }  // counts a tick of it
    void sampled() { samples -= samples > 0; }
  };
  struct Bucket {
    Rate plain;
    std::array<Rate, kArms> arms{};
    int probe_every = kProbeFirst;
    int since_probe = 0;
    Run probe;
    int explore_every = kExploreEvery;
    int since_explore = 0;  // max_draft_rows calls since the last exploration began
    bool explore_up = false;  // the last exploration's direction (they alternate)
    int explore_from = -1;    // the best arm when the exploration now running began
    Rate fresh;               // that exploration's samples
    int pinned = -1;    // the arm measured first where shapes cost (pin)
    Run explore;
    int explore_arm = -1;
    bool exploring = false;  // the last max_draft_rows capped to the explored arm
    int trial = -1;          // the arm below the best (or the leader) the last one capped to, for its first samples
  };
  static int arm_of(std::int32_t draft_rows);
  static std::int32_t top_of(int arm) { return (std::int32_t{2} << arm) - 1; }
  // The best arm of at least `min_samples` samples (1: the one leading so far); -1: none.
  static int best_arm(const Bucket& y, int min_samples = kArmSamples);
  static int n_spec(const Bucket& y);
  // Whether `y`'s verifying ticks were measured to yield less than its plain ones, on evidence.
  static bool loses(const Bucket& y, double spec_rate);
  const Bucket* find(std::size_t decode_rows) const;
  std::vector<Bucket> buckets_;
  bool plain_first_ = false;
};

}  // namespace uma
