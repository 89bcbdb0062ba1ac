// How long an idle compute thread spins before it sleeps.
//
// ggml's CPU backend (built with OpenMP) meets at a barrier after every operation of a graph, and
// libgomp spins 300000 pauses there before it sleeps. On a core another process holds, a spinning
// waiter takes the time the thread it waits for needs (and a spinning vCPU is descheduled by its
// hypervisor): one decode of two threads beside one busy loop took 3 s instead of 25 ms, before
// the thread governor could see the neighbour. kComputeSpinPauses keeps the quiet speed within
// noise and bounds such a decode to a few times its quiet time (docs/BENCHMARKS.md, "Serving
// beside other work").
//
// libgomp reads GOMP_SPINCOUNT once, in its constructor, before main; and libc's own start-up
// restores the environment a .preinit_array function would change. So the daemon execs itself
// again with the variable set, first thing in main, unless the operator set GOMP_SPINCOUNT or
// OMP_WAIT_POLICY (kept as given).
#pragma once

#include <string>

namespace uma {

inline constexpr const char* kComputeSpinPauses = "3000";

// Returns when nothing has to change, or when the exec failed (the process runs on with libgomp's
// default; the start line says which). Call before any other thread or file exists.
void exec_with_compute_spin(char** argv);

// For the start line: "spin 3000 pauses, then sleep (GOMP_SPINCOUNT)", or what OMP_WAIT_POLICY says.
std::string compute_spin_setting();

}  // namespace uma
