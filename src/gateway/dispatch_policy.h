// The gateway's dispatch decisions, as pure functions and plain data over synthetic-able facts with
// the time passed in (as the scheduler's policy is: sched/policy.h), so every way a request can go
// is unit-tested without sockets, Redis or a clock (dispatch_policy_test.cc). The Proxy carries out
// what decide_dispatch() says; GatewayServer keeps its waiting requests in WaitLists; ColdLoads
// keeps one LoadAttempt per model it sees loaded.
//
// Thread-safety: none needed (values, and objects of one owner: the gateway's I/O thread).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace uma::gateway {

using DispatchClock = std::chrono::steady_clock;

// What a request naming a model finds: a live agent serving it; only the catalog (no agent has it
// loaded); nothing. A cluster without a catalog takes any name (as one llama-server does).
enum class ModelLookup : std::uint8_t { kServed, kCatalogOnly, kUnknown };

enum class DispatchStep : std::uint8_t {
  kRoute,        // route it among the agents (routing's outcome decides next)
  kAwaitModel,   // its model is only in the catalog: wait while one load runs somewhere
  kSend,         // routing chose an agent
  kQueue,        // every agent that could serve it is full: wait for room, at the back
  kQueueAgain,   // woken, and still no room: back to its place at the front
  kOverloaded,   // it would wait, but the waiting room is full (429)
  kUnavailable,  // no agent can serve it (503)
};
const char* dispatch_step_name(DispatchStep s);

struct DispatchFacts {
  ModelLookup model = ModelLookup::kServed;
  bool loads_on_demand = false;  // the gateway can have a model loaded (a loader is registered)
  // Routing's outcome; `routed` false: not routed yet.
  bool routed = false;
  bool chose = false;            // an agent was chosen
  std::int32_t full = 0;         // candidates passed over for being full
  bool woken = false;            // it was waiting for room already
  std::size_t waiting = 0;       // requests waiting now (for room or for their model)
  std::size_t max_waiting = 0;
};

DispatchStep decide_dispatch(const DispatchFacts& f);

// The requests waiting in a gateway: for room on an agent (first come, first served; one woken
// that still finds none keeps its place at the front), and for their model to be loaded. Both
// count against one bound. `T` names a request (the gateway's Proxy*, a number in tests).
template <class T>
class WaitLists {
 public:
  using TimePoint = DispatchClock::time_point;
  explicit WaitLists(std::size_t max_waiting) : max_(max_waiting) {}

  std::size_t size() const { return room_.size() + models_.size(); }
  std::size_t waiting_for_room() const { return room_.size(); }
  std::size_t waiting_for_models() const { return models_.size(); }
  bool full() const { return size() >= max_; }
  std::size_t max_waiting() const { return max_; }

  // `since`: when it first waited (a woken request that found no room keeps its age and its place).
  void wait_for_room(T who, TimePoint since, bool front) {
    if (front) {
      room_.push_front({who, {}, since});
    } else {
      room_.push_back({who, {}, since});
    }
  }
  void wait_for_model(T who, std::string model, TimePoint now) { models_.push_back({who, std::move(model), now}); }
  // Out of whichever list holds it: how long it waited there (nullopt: it was in neither).
  std::optional<DispatchClock::duration> leave(T who, TimePoint now) {
    for (auto* list : {&room_, &models_}) {
      auto it = std::find_if(list->begin(), list->end(), [&](const Entry& e) { return e.who == who; });
      if (it == list->end()) continue;
      const auto waited = now - it->since;
      list->erase(it);
      return waited;
    }
    return std::nullopt;
  }
  // Room may have appeared: the oldest request waiting for it, out of the list (it dispatches
  // again, and may come back at the front: then the others wait too, first come, first served).
  std::optional<T> next_for_room() {
    if (room_.empty()) return std::nullopt;
    T who = room_.front().who;
    room_.pop_front();
    return who;
  }
  std::optional<T> front_for_room() const { return room_.empty() ? std::nullopt : std::optional<T>(room_.front().who); }
  // Those waiting for room longer than `timeout`: out of the list.
  std::vector<T> room_expired(TimePoint now, DispatchClock::duration timeout) {
    std::vector<T> out;
    for (auto it = room_.begin(); it != room_.end();) {
      if (now - it->since <= timeout) {
        ++it;
        continue;
      }
      out.push_back(it->who);
      it = room_.erase(it);
    }
    return out;
  }
  struct ModelVerdicts {
    std::vector<T> ready;                  // an agent serves its model now: dispatch again
    std::vector<T> expired;                // waited longer than the timeout: end with the load's error
    std::vector<std::string> still_cold;   // models still loaded nowhere: see that a load runs (each once)
  };
  // The requests waiting for models, judged by `lookup` at `now` (the lists are left as they are:
  // the request leaves when it is dispatched or ended).
  ModelVerdicts judge_models(const std::function<ModelLookup(const std::string&)>& lookup, TimePoint now,
                             DispatchClock::duration timeout) const {
    ModelVerdicts v;
    std::set<std::string> cold;
    for (const Entry& e : models_) {
      if (lookup(e.model) != ModelLookup::kCatalogOnly) {
        v.ready.push_back(e.who);
      } else if (now - e.since > timeout) {
        v.expired.push_back(e.who);
      } else if (cold.insert(e.model).second) {
        v.still_cold.push_back(e.model);
      }
    }
    return v;
  }

 private:
  struct Entry {
    T who;
    std::string model;
    TimePoint since;
  };
  std::size_t max_;
  std::deque<Entry> room_;
  std::deque<Entry> models_;
};

// One model's load as one gateway sees it (ColdLoads): whether to try the cluster-wide lock now,
// and what follows each outcome. One explicit state, one setter that aborts on a transition
// nobody wrote code for:
//   idle     --want_lock-->  locking  (SET NX PX in flight)
//   locking  --lock_result(taken)--> loading (our POST /load runs) | (busy or failed) --> backoff
//   loading  --load_result--> backoff (failed: until `retry`; loaded: one lock ttl, while the new
//            agent's beat reaches every gateway's view)
//   backoff  --want_lock after its time--> locking
class LoadAttempt {
 public:
  enum class Phase : std::uint8_t { kIdle, kLocking, kLoading, kBackoff };
  using TimePoint = DispatchClock::time_point;

  Phase phase() const { return phase_; }
  TimePoint retry_at() const { return retry_at_; }
  // A request waits for the model: true when the lock should be tried now (-> locking).
  bool want_lock(TimePoint now);
  // The lock was taken (and the model's entry read): the load may start; else back off.
  void lock_result(bool taken, TimePoint now, DispatchClock::duration retry);
  // A lock taken but nothing to load on (no loader with room): back off (the lock is released).
  void no_loader(TimePoint now, DispatchClock::duration retry) { lock_result(false, now, retry); }
  void load_result(bool loaded, TimePoint now, DispatchClock::duration retry, DispatchClock::duration lock_ttl);

 private:
  void set_phase(Phase to);
  Phase phase_ = Phase::kIdle;
  TimePoint retry_at_{};
};

}  // namespace uma::gateway
