// CpuMeter: what the compute threads need to know about the CPUs they share (LevelDB's Env idea,
// for the CPUs only; sched/thread_governor.h decides from it).
//
// - allowed_cores(): the cores this process may use: its affinity mask, capped by a cgroup CPU
//   quota (cgroup v2 cpu.max or v1 cfs_quota_us, the smallest up the hierarchy), never nproc alone.
// - process_cpu_ms(): CPU time of every thread of this process so far.
// - sample(): the busy time (user, system, irq, softirq, steal; niced processes' time only when
//   this process is niced too: others yield to us) of the CPUs in the affinity mask and this
//   process's CPU time, at one instant. Between two samples, busy less own over the
//   wall time is the cores others kept busy among ours: a neighbour process, or a hypervisor's steal.
// The daemon uses ProcCpuMeter (Linux /proc and /sys); tests give the scheduler a fake.
// Thread-safety: a meter belongs to the compute thread.
#pragma once

#include <string>

namespace uma {

struct CpuSample {
  double wall_ms = 0.0;     // steady clock
  double busy_ms = 0.0;     // summed over the CPUs in the affinity mask
  double own_cpu_ms = 0.0;  // this process, every thread
};

class CpuMeter {
 public:
  virtual ~CpuMeter() = default;
  virtual int allowed_cores() const = 0;
  virtual int mask_cpus() const { return allowed_cores(); }  // CPUs in the affinity mask (>= allowed_cores)
  virtual double process_cpu_ms() const = 0;
  virtual bool sample(CpuSample* out) = 0;  // false: the machine's counters are not readable
};

// Cores others kept busy among ours between two samples (0 when the wall time did not move).
double others_cores(const CpuSample& from, const CpuSample& to);

class ProcCpuMeter final : public CpuMeter {
 public:
  // `stat_path`: the kernel's per-CPU counters (/proc/stat); `root`: where /proc/self/cgroup and
  // /sys/fs/cgroup are found (tests give a folder of their own).
  explicit ProcCpuMeter(std::string stat_path = "/proc/stat", const std::string& root = "");
  int allowed_cores() const override { return allowed_; }
  int mask_cpus() const override { return cpus_; }
  double process_cpu_ms() const override;
  bool sample(CpuSample* out) override;
  // How allowed_cores() was found, for the start line ("2 of 2 CPUs", "3 of 8 CPUs (cgroup quota 2.5)").
  const std::string& describe() const { return why_; }

 private:
  std::string stat_path_;
  std::string mask_;  // by CPU number: '1' in the affinity mask
  int allowed_ = 1;
  int cpus_ = 1;
  double ms_per_tick_ = 10.0;  // /proc/stat counts in USER_HZ ticks
  bool count_nice_ = false;    // this process runs niced: niced neighbours compete as equals
  std::string why_;
};

}  // namespace uma
