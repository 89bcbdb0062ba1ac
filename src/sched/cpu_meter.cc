#include "sched/cpu_meter.h"

#include <sched.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <fstream>
#include <sstream>

namespace uma {

namespace {

double steady_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The cores a cgroup quota allows, the smallest from `dir` up to `root` (0: no quota found).
// v2 writes "max 100000" or "<quota> <period>" in cpu.max; v1 cpu.cfs_quota_us (-1: none) and cpu.cfs_period_us.
double quota_from(std::string dir, const std::string& root, bool v2) {
  double best = 0.0;
  for (;;) {
    double cores = 0.0;
    if (v2) {
      std::ifstream f(dir + "/cpu.max");
      std::string quota;
      double period = 0;
      if (f >> quota >> period && quota != "max" && period > 0) cores = std::atof(quota.c_str()) / period;
    } else {
      std::ifstream q(dir + "/cpu.cfs_quota_us"), p(dir + "/cpu.cfs_period_us");
      double quota = -1, period = 0;
      if (q >> quota && p >> period && quota > 0 && period > 0) cores = quota / period;
    }
    if (cores > 0 && (best == 0.0 || cores < best)) best = cores;
    if (dir.size() <= root.size()) return best;
    dir.erase(dir.find_last_of('/'));
  }
}

// The cgroup CPU quota of this process in cores (0: none); `root` prefixes /proc and /sys.
double cgroup_quota(const std::string& root) {
  std::ifstream f(root + "/proc/self/cgroup");
  std::string line;
  while (std::getline(f, line)) {
    const auto a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    const std::string rel = path == "/" ? "" : path;
    if (line.compare(0, a, "0") == 0 && controllers.empty()) {
      if (double q = quota_from(root + "/sys/fs/cgroup" + rel, root + "/sys/fs/cgroup", true); q > 0) return q;
      continue;
    }
    std::stringstream names(controllers);
    for (std::string name; std::getline(names, name, ',');) {
      if (name != "cpu") continue;
      for (const char* mount : {"/sys/fs/cgroup/cpu,cpuacct", "/sys/fs/cgroup/cpu"}) {
        if (double q = quota_from(root + mount + rel, root + mount, false); q > 0) return q;
      }
    }
  }
  return 0.0;
}

}  // namespace

double others_cores(const CpuSample& from, const CpuSample& to) {
  const double wall = to.wall_ms - from.wall_ms;
  if (!(wall > 0)) return 0.0;
  return std::max(0.0, ((to.busy_ms - from.busy_ms) - (to.own_cpu_ms - from.own_cpu_ms)) / wall);
}

ProcCpuMeter::ProcCpuMeter(std::string stat_path, const std::string& root) : stat_path_(std::move(stat_path)) {
  if (const long hz = ::sysconf(_SC_CLK_TCK); hz > 0) ms_per_tick_ = 1000.0 / double(hz);
  errno = 0;
  const int niceness = ::getpriority(PRIO_PROCESS, 0);
  count_nice_ = errno == 0 && niceness > 0;
  cpu_set_t set;
  CPU_ZERO(&set);
  int cpus = 0, online = static_cast<int>(std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN)));
  if (::sched_getaffinity(0, sizeof(set), &set) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (!CPU_ISSET(c, &set)) continue;
      if (static_cast<std::size_t>(c) >= mask_.size()) mask_.resize(static_cast<std::size_t>(c) + 1, '0');
      mask_[static_cast<std::size_t>(c)] = '1';
      ++cpus;
    }
  }
  if (cpus == 0) {  // no mask: every online CPU
    cpus = online;
    mask_.assign(static_cast<std::size_t>(online), '1');
  }
  allowed_ = cpus_ = cpus;
  why_ = std::to_string(cpus) + " of " + std::to_string(online) + " CPUs";
  if (const double quota = cgroup_quota(root); quota > 0 && quota < cpus) {
    allowed_ = std::max(1, static_cast<int>(std::floor(quota + 0.25)));  // 1.8 cores of quota: 2 threads
    std::ostringstream s;
    s << why_ << ", cgroup quota " << quota << " cores";
    why_ = s.str();
  }
}

double ProcCpuMeter::process_cpu_ms() const {
  timespec ts{};
  if (::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) != 0) return 0.0;
  return double(ts.tv_sec) * 1e3 + double(ts.tv_nsec) * 1e-6;
}

bool ProcCpuMeter::sample(CpuSample* out) {
  std::ifstream f(stat_path_);
  if (!f) return false;
  std::string line;
  double busy_ticks = 0;
  bool any = false;
  while (std::getline(f, line)) {
    if (line.compare(0, 3, "cpu") != 0) break;  // the per-CPU lines come first
    if (line.size() < 4 || line[3] < '0' || line[3] > '9') continue;  // the "cpu " total
    std::istringstream in(line.substr(3));
    std::size_t cpu = 0;
    double user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
    in >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq;
    if (!in) continue;
    in >> steal;  // absent on old kernels
    if (cpu >= mask_.size() || mask_[cpu] != '1') continue;
    // Niced processes' time is apart: they yield to us, unless we run niced ourselves.
    busy_ticks += user + system + irq + softirq + steal + (count_nice_ ? nice : 0);  // guest time is inside user
    any = true;
  }
  if (!any) return false;
  out->wall_ms = steady_ms();
  out->busy_ms = busy_ticks * ms_per_tick_;
  out->own_cpu_ms = process_cpu_ms();
  return true;
}

}  // namespace uma
