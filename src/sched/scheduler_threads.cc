// Threads that follow the machine (scheduler.h, use_cpu_meter): the window measure and the
// governor's count, applied to the decoder and the draft model between decodes.
#include "sched/scheduler.h"

#include <spdlog/spdlog.h>

namespace uma {

void Scheduler::use_cpu_meter(CpuMeter* meter, bool adaptive) {
  threads_.meter = meter;
  threads_.sampled = false;
  const std::int32_t now = decoder_.threads();
  const int most = adaptive ? meter->allowed_cores() : std::max<std::int32_t>(now, 1);
  threads_.governor.emplace(most, meter->mask_cpus(), adaptive);
  metrics_.compute_threads = threads_.governor->threads();
}

double Scheduler::threads_before_decode(Clock::time_point now) {
  if (threads_.meter == nullptr) return -1.0;
  ThreadGovernor& g = *threads_.governor;
  if (!threads_.sampled || now - threads_.window_at >= std::chrono::duration<double, std::milli>(ThreadGovernor::kWindowMs)) {
    CpuSample s;
    if (threads_.meter->sample(&s)) {
      // The first window starts at the first decode: the time before it says nothing of serving.
      if (threads_.sampled) g.observe_window(others_cores(threads_.last, s));
      threads_.last = s;
      threads_.sampled = true;
    }
    threads_.window_at = now;
    metrics_.cpu_others_cores = g.others_cores();
  }
  const int n = g.threads();
  if (g.adaptive() && decoder_.threads() > 0 && decoder_.threads() != n) {
    spdlog::debug("compute threads {} -> {} (others keep {:.2f} cores busy)", decoder_.threads(), n, g.others_cores());
    decoder_.set_threads(n);
    if (Drafter* d = spec_.drafter()) d->set_threads(n);
    metrics_.compute_thread_changes_total++;
  }
  metrics_.compute_threads = decoder_.threads();
  // A fixed pool's decodes are not judged: no CPU-time reads on its hot path.
  return g.adaptive() && decoder_.computes_on_host() ? threads_.meter->process_cpu_ms() : -1.0;
}

void Scheduler::threads_after_decode(double wall_ms, double cpu_before_ms) {
  if (threads_.meter == nullptr || cpu_before_ms < 0) return;
  threads_.governor->observe_decode(wall_ms, threads_.meter->process_cpu_ms() - cpu_before_ms);
}

}  // namespace uma
