#include "daemon/compute_spin.h"

#include <unistd.h>

#include <cstdlib>
#include <string>

namespace uma {

void exec_with_compute_spin(char** argv) {
  if (std::getenv("GOMP_SPINCOUNT") != nullptr || std::getenv("OMP_WAIT_POLICY") != nullptr) return;
  if (::setenv("GOMP_SPINCOUNT", kComputeSpinPauses, 1) != 0) return;
  ::execv("/proc/self/exe", argv);
  ::unsetenv("GOMP_SPINCOUNT");  // not applied: say so rather than claim it
}

std::string compute_spin_setting() {
  if (const char* spin = std::getenv("GOMP_SPINCOUNT")) return std::string("spin ") + spin + " pauses, then sleep (GOMP_SPINCOUNT)";
  if (const char* policy = std::getenv("OMP_WAIT_POLICY")) return std::string("OMP_WAIT_POLICY=") + policy;
  return "libgomp's default";
}

}  // namespace uma
