// What crosses between the I/O thread and the compute thread, and nothing else: front ends include
// this, not the scheduler.
// - toward compute: a WorkSubmit takes WorkItems (request.h: a Request or a CancelRequest);
//   any thread may call it; it never blocks on the compute thread's work.
// - toward I/O: the compute thread hands a tick's Events to an EventSink, which must not block on
//   the I/O thread (it posts them onto the I/O loop).
#pragma once

#include <functional>
#include <vector>

#include "serve/request.h"

namespace uma {

using WorkSubmit = std::function<void(WorkItem)>;

class EventSink {
 public:
  virtual ~EventSink() = default;
  // Called on the compute thread; must not block on the I/O thread.
  virtual void deliver(std::vector<Event> events) = 0;
};

}  // namespace uma
