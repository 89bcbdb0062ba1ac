#include "sched/time_source.h"

namespace uma {

namespace {
class SteadyTime final : public TimeSource {
 public:
  Clock::time_point now() const override { return Clock::now(); }
};
}  // namespace

const TimeSource& steady_time() {
  static const SteadyTime time;
  return time;
}

}  // namespace uma
