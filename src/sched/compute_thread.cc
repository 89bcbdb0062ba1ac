#include "sched/compute_thread.h"

#include <spdlog/spdlog.h>

#include <chrono>

namespace uma {

namespace {
constexpr std::chrono::milliseconds kPublishEvery{20};
}  // namespace

ComputeThread::ComputeThread(Scheduler& scheduler, EventSink& sink) : scheduler_(scheduler), sink_(sink) {}

ComputeThread::~ComputeThread() {
  request_stop();
  join();
}

void ComputeThread::start(std::function<void()> on_stopped) {
  on_stopped_ = std::move(on_stopped);
  thread_ = std::thread([this] { run(); });
}

void ComputeThread::submit(WorkItem item) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    inbox_.push_back(std::move(item));
  }
  cv_.notify_one();
}

void ComputeThread::request_stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_one();
}

void ComputeThread::join() {
  if (thread_.joinable()) thread_.join();
}

std::size_t ComputeThread::apply(std::deque<WorkItem>& work, std::vector<Event>& events) {
  std::size_t admitted = 0;
  for (WorkItem& item : work) {
    if (auto* r = std::get_if<Request>(&item)) {
      scheduler_.admit(std::move(*r), events);
      ++admitted;
    } else {
      scheduler_.cancel(std::get<CancelRequest>(item).id, events);
    }
  }
  work.clear();
  return admitted;
}

// The rest of a burst, before a tick that would only prefill (policy.h gather_window_ms): what
// arrives within the window is admitted too, so the tick prefills it all.
bool ComputeThread::gather(std::deque<WorkItem>& work, std::vector<Event>& events) {
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = [&] {  // the window grows with the tick the arrivals make
    return start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                       std::chrono::duration<double, std::milli>(scheduler_.gather_window_ms()));
  };
  auto until = deadline();
  if (until <= start) return false;
  std::unique_lock<std::mutex> lock(mu_);
  while (cv_.wait_until(lock, until, [&] { return stop_ || !inbox_.empty(); }) && !stop_) {
    work.swap(inbox_);
    lock.unlock();
    scheduler_.count_gathered(apply(work, events));
    until = deadline();
    lock.lock();
  }
  return stop_;
}

void ComputeThread::run() {
  std::deque<WorkItem> work;
  std::vector<Event> events;
  bool stopping = false;
  Clock::time_point last_publish{};
  while (!stopping) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !inbox_.empty() || scheduler_.has_work() || scheduler_.calibrating(); });
      work.swap(inbox_);
      stopping = stop_;
    }
    if (apply(work, events) > 0 && !stopping) stopping = gather(work, events);
    if (stopping) scheduler_.fail_all(Status(ErrorCode::kShuttingDown, "server shutting down"), events);
    else if (scheduler_.has_work()) scheduler_.tick(events);
    else if (scheduler_.calibrating()) (void)scheduler_.calibrate_step();  // idle: one chunk; a failure is logged
    // The gauges and the session table are for people and scrapers: refreshing them every tick
    // (a table of every session) would be host time the accelerator waits for at 64 streams.
    // Idle, they are always current, and published before the events that made the daemon idle
    // are delivered: a client that saw its last `done` reads metrics that include it.
    const auto now = scheduler_.time().now();
    if (!scheduler_.has_work() || now - last_publish >= kPublishEvery) {
      scheduler_.publish_metrics();
      last_publish = now;
    }
    if (!events.empty()) {
      sink_.deliver(std::move(events));
      events.clear();
    }
  }
  spdlog::debug("compute thread stopped");
  if (on_stopped_) on_stopped_();
}

}  // namespace uma
