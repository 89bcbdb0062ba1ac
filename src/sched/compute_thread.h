// ComputeThread: the thread that owns the model context and the Scheduler.
//
// The I/O thread hands it WorkItems through submit() (a mutex-guarded queue plus a condition
// variable: the wakeup toward compute). The compute thread hands Events back through an EventSink
// once per tick (the sink posts them onto the I/O loop: the wakeup toward I/O).
// Loop phases: drain inbox -> (before a prefill-only tick: gather the rest of a burst, at most
// Scheduler::gather_window_ms) -> tick (one decode), or with nothing to serve one calibration
// step (Scheduler::calibrate_step) -> publish metrics -> deliver events; it sleeps only when no
// session is prefilling or decoding and the calibration is over.
// Thread-safety: submit() and request_stop() may be called from any thread; everything else runs
// on the compute thread. request_stop() makes the loop fail every open request with
// kShuttingDown, deliver those events, call on_stopped, and exit.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "serve/io_boundary.h"
#include "serve/request.h"
#include "sched/scheduler.h"

namespace uma {

class ComputeThread {
 public:
  ComputeThread(Scheduler& scheduler, EventSink& sink);
  ~ComputeThread();  // joins

  void start(std::function<void()> on_stopped);
  void submit(WorkItem item);
  void request_stop();
  void join();

 private:
  void run();
  std::size_t apply(std::deque<WorkItem>& work, std::vector<Event>& events);  // the requests admitted
  bool gather(std::deque<WorkItem>& work, std::vector<Event>& events);  // true: stop was requested

  Scheduler& scheduler_;
  EventSink& sink_;
  std::function<void()> on_stopped_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<WorkItem> inbox_;  // guarded by mu_
  bool stop_ = false;           // guarded by mu_
  std::thread thread_;
};

}  // namespace uma
