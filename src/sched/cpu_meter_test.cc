#include "sched/cpu_meter.h"

#include <gtest/gtest.h>
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace uma {
namespace {

TEST(CpuMeter, OthersAreTheBusyTimeOfOurCpusLessOursOverTheWallTime) {
  const CpuSample a{1000.0, 5000.0, 300.0};
  EXPECT_DOUBLE_EQ(others_cores(a, {1500.0, 5000.0 + 900.0, 300.0 + 400.0}), 1.0);  // 900 busy, 400 ours, in 500 ms
  EXPECT_DOUBLE_EQ(others_cores(a, {1500.0, 5000.0 + 300.0, 300.0 + 400.0}), 0.0) << "counters of different grain: never negative";
  EXPECT_DOUBLE_EQ(others_cores(a, a), 0.0);
}

class ProcCpuMeterTest : public ::testing::Test {
 protected:
  std::string path_ = ::testing::TempDir() + "/uma-cpu-meter-stat-" + std::to_string(::getpid());
  void TearDown() override { std::remove(path_.c_str()); }

  // A /proc/stat whose every CPU of ours (and CPU 4000, never ours) has `busy` ticks of user time,
  // three times as many of niced processes' and `idle` idle ticks.
  void write_stat(long busy, long idle) {
    cpu_set_t set;
    CPU_ZERO(&set);
    ASSERT_EQ(::sched_getaffinity(0, sizeof(set), &set), 0);
    std::ofstream f(path_);
    f << "cpu  1 2 3 4 5 6 7 8 0 0\n";
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &set)) f << "cpu" << c << " " << busy << " " << 3 * busy << " 0 " << idle << " 0 0 0 0 0 0\n";
    }
    f << "cpu4000 999999 0 0 0 0 0 0 0 0 0\nintr 1 2 3\nctxt 12345\n";
  }
};

TEST_F(ProcCpuMeterTest, SumsTheBusyTicksOfTheCpusInTheAffinityMaskOnly) {
  ProcCpuMeter meter(path_);
  const double tick_ms = 1000.0 / double(::sysconf(_SC_CLK_TCK));
  ASSERT_GE(meter.allowed_cores(), 1);
  EXPECT_LE(meter.allowed_cores(), CPU_COUNT([] {
    static cpu_set_t s;
    ::sched_getaffinity(0, sizeof(s), &s);
    return &s;
  }()));
  EXPECT_FALSE(meter.describe().empty());
  write_stat(100, 50);
  CpuSample a, b;
  ASSERT_TRUE(meter.sample(&a));
  write_stat(130, 70);
  ASSERT_TRUE(meter.sample(&b));
  cpu_set_t set;
  ::sched_getaffinity(0, sizeof(set), &set);
  errno = 0;
  const bool niced = ::getpriority(PRIO_PROCESS, 0) > 0 && errno == 0;
  EXPECT_DOUBLE_EQ(b.busy_ms - a.busy_ms, (niced ? 4 : 1) * 30.0 * CPU_COUNT(&set) * tick_ms)
      << "CPU 4000 is not ours; niced neighbours yield unless we are niced too";
  EXPECT_GE(b.wall_ms, a.wall_ms);
  EXPECT_GE(b.own_cpu_ms, a.own_cpu_ms);
}

TEST_F(ProcCpuMeterTest, NoCountersIsNoSample) {
  ProcCpuMeter meter(path_ + ".missing");
  CpuSample s;
  EXPECT_FALSE(meter.sample(&s));
}

// A cgroup hierarchy of our own: the smallest quota up the tree caps the threads, rounded so that
// 1.8 cores of quota still get 2 threads and 1.5 get 1.
class CgroupQuota : public ::testing::Test {
 protected:
  std::string root_ = ::testing::TempDir() + "/uma-cgroup-" + std::to_string(::getpid());
  void TearDown() override { std::filesystem::remove_all(root_); }
  void write(const std::string& path, const std::string& text) {
    const std::filesystem::path full = root_ + path;
    std::filesystem::create_directories(full.parent_path());
    std::ofstream(full) << text;
  }
  static int cpus() {
    cpu_set_t s;
    ::sched_getaffinity(0, sizeof(s), &s);
    return CPU_COUNT(&s);
  }
};

TEST_F(CgroupQuota, V2TakesTheSmallestCpuMaxUpTheTree) {
  write("/proc/self/cgroup", "0::/pods/uma\n");
  write("/sys/fs/cgroup/pods/uma/cpu.max", "max 100000\n");
  write("/sys/fs/cgroup/pods/cpu.max", "50000 100000\n");  // half a core for the pod
  ProcCpuMeter meter("/proc/stat", root_);
  EXPECT_EQ(meter.allowed_cores(), 1);
  EXPECT_EQ(meter.mask_cpus(), cpus());
  if (cpus() > 1) {
    EXPECT_NE(meter.describe().find("cgroup quota 0.5"), std::string::npos) << meter.describe();
  }
}

TEST_F(CgroupQuota, V1ReadsTheCpuControllersQuotaAndNoQuotaLeavesTheMask) {
  write("/proc/self/cgroup", "12:memory:/x\n4:cpu,cpuacct:/docker/abc\n");
  write("/sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "180000\n");
  write("/sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_period_us", "100000\n");
  ProcCpuMeter meter("/proc/stat", root_);
  EXPECT_EQ(meter.allowed_cores(), std::min(cpus(), 2)) << "1.8 cores: 2 threads";
  write("/sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "-1\n");
  EXPECT_EQ(ProcCpuMeter("/proc/stat", root_).allowed_cores(), cpus());
}

TEST(ProcCpuMeterReal, TheKernelsCountersAndTheProcessCpuTimeMove) {
  ProcCpuMeter meter;
  CpuSample a, b;
  ASSERT_TRUE(meter.sample(&a));
  const double start = meter.process_cpu_ms();
  volatile double x = 0;
  while (meter.process_cpu_ms() < start + 20.0) x = x + 1.0;  // 20 ms of our own work
  ASSERT_TRUE(meter.sample(&b));
  EXPECT_GE(b.own_cpu_ms - a.own_cpu_ms, 20.0);
  EXPECT_GE(b.busy_ms, a.busy_ms);
}

}  // namespace
}  // namespace uma
