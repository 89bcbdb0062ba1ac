#!/usr/bin/env bash
# The GPU path end to end, on a machine with an NVIDIA GPU that reaches no registry (the `device`
# machine; any air-gapped GPU server): set up from an offline bundle, build llama.cpp with CUDA and
# the project against it, run the unit + end-to-end tests (oracle model) with every layer on the
# GPU, then the GPU benchmark.
#   scripts/gpu_check.sh BUNDLE_DIR [build|tests|bench|all]      (default all)
# (build, tests and bench can be separate calls: each step reuses what the last one built.)
# BUNDLE_DIR: scripts/bundle.sh's output. Logs and results go to $OUT when set (the device tool
# brings that folder back), else build-cuda/gpu-check.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
UMA_BUNDLE=$(cd "${1:?usage: scripts/gpu_check.sh BUNDLE_DIR [build|tests|bench|all]}" && pwd)
export UMA_BUNDLE
what=${2:-all}
export UMA_GPU=cuda
# A bundle-built machine may lack nginx, libcurl and systemd: the remote tier's tests and socket
# activation skip there (not in CI).
export UMA_ALLOW_SKIP_REMOTE=1
# Tools some GPU images keep outside PATH.
for d in /usr/local/cuda/bin /opt/torch/.venv/bin; do [ -d "$d" ] && PATH=$PATH:$d; done
export PATH
results=${OUT:-build-cuda/gpu-check}
mkdir -p "$results"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$results/gpu.txt" || true
if [ "$what" = build ] || [ "$what" = all ]; then
  # llama-server and llama-batched-bench too, so the benchmark finds them built.
  start=$(date +%s)
  scripts/setup.sh llama-server llama-batched-bench 2>&1 | tee "$results/setup.log" | tail -3
  cmake -S . -B build-cuda -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DUMA_BUILD_TESTS=ON >/dev/null
  cmake --build build-cuda -j "$(nproc)" 2>&1 | tee "$results/build.log" | tail -2
  echo "build: $(( $(date +%s) - start )) s"
fi
if [ "$what" = tests ] || [ "$what" = all ]; then
  # The end-to-end tests that assume one KV pool get it from their harness; those about
  # per-sequence KV (the default) ask for it, with every layer on the GPU here.
  scripts/test.sh 2>&1 | tee "$results/tests.log" | grep -E '^==|tests passed|tests failed|\*\*\*|Failed|SKIP|skipped' || true
  grep -q 'all tests passed' "$results/tests.log" || { echo "GPU tests failed (log: $results/tests.log)"; exit 1; }
fi
if [ "$what" = bench ] || [ "$what" = all ]; then
  bench/gpu.sh "$results/bench" 2>&1 | tee "$results/bench.log" | tail -14
fi
