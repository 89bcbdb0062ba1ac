#include "gateway/dispatch_policy.h"

#include "common/state_machine.h"

namespace uma::gateway {

const char* dispatch_step_name(DispatchStep s) {
  switch (s) {
    case DispatchStep::kRoute: return "route";
    case DispatchStep::kAwaitModel: return "await-model";
    case DispatchStep::kSend: return "send";
    case DispatchStep::kQueue: return "queue";
    case DispatchStep::kQueueAgain: return "queue-again";
    case DispatchStep::kOverloaded: return "overloaded";
    case DispatchStep::kUnavailable: return "unavailable";
  }
  return "?";
}

DispatchStep decide_dispatch(const DispatchFacts& f) {
  const bool room_to_wait = f.waiting < f.max_waiting;
  if (!f.routed) {
    if (f.model != ModelLookup::kCatalogOnly || !f.loads_on_demand) return DispatchStep::kRoute;
    return room_to_wait ? DispatchStep::kAwaitModel : DispatchStep::kOverloaded;
  }
  if (f.chose) return DispatchStep::kSend;
  if (f.full == 0) return DispatchStep::kUnavailable;
  if (f.woken) return DispatchStep::kQueueAgain;  // it keeps the place it had (not counted twice)
  return room_to_wait ? DispatchStep::kQueue : DispatchStep::kOverloaded;
}

void LoadAttempt::set_phase(Phase to) {
  using P = Phase;
  static const StateTable<Phase, 4> table("load attempt", {"idle", "locking", "loading", "backoff"},
                                          {{P::kIdle, {P::kLocking}},
                                           {P::kBackoff, {P::kLocking}},
                                           {P::kLocking, {P::kLoading, P::kBackoff}},
                                           {P::kLoading, {P::kBackoff}}});
  move_state(table, phase_, to, "of a model");
}

bool LoadAttempt::want_lock(TimePoint now) {
  if (phase_ == Phase::kLocking || phase_ == Phase::kLoading) return false;
  if (phase_ == Phase::kBackoff && now < retry_at_) return false;
  set_phase(Phase::kLocking);
  return true;
}

void LoadAttempt::lock_result(bool taken, TimePoint now, DispatchClock::duration retry) {
  if (taken) return set_phase(Phase::kLoading);
  set_phase(Phase::kBackoff);
  retry_at_ = now + retry;
}

void LoadAttempt::load_result(bool loaded, TimePoint now, DispatchClock::duration retry, DispatchClock::duration lock_ttl) {
  set_phase(Phase::kBackoff);
  retry_at_ = now + (loaded ? lock_ttl : retry);
}

}  // namespace uma::gateway
