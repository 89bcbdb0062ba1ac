#!/usr/bin/env bash
# The cluster benchmark with one agent per GPU, one command on a multi-GPU machine:
#   bench/gpu_cluster.sh [OUT_DIR]      (default build-cuda/bench-gpu-cluster)
# bench/cluster.sh on the CUDA build: as many agents as GPUs (agent i sees only GPU i), an 8B-shape
# Q4_0 model, 12 groups x 2 users with 4000-token system prompts, 240 requests at c=8, predicted
# routing against round-robin, each on a fresh cluster. Each agent keeps at most 8 finished
# conversations, all on its GPU (no host tier: a restore from host memory
# would price a hit by that path instead of by routing): one agent holds what about half the
# groups need, the cluster all of them — the regime where where a request goes decides whether its
# prefix is cached. Every UMA_CLUSTER_* / UMA_AGENT_* of bench/cluster.sh overrides the defaults.
# Env: UMA_BUNDLE (offline setup from scripts/bundle.sh's output), UMA_BUILD (build-cuda).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
export UMA_GPU=cuda UMA_BUILD=${UMA_BUILD:-build-cuda}
out=${1:-$UMA_BUILD/bench-gpu-cluster}
mkdir -p "$out"
scripts/setup.sh >/dev/null
cmake -S . -B "$UMA_BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$UMA_BUILD" -j "$(nproc)" --target umad uma-gw uma-bench uma-mkmodel uma-cli >/dev/null
model=$UMA_BUILD/models/8b-q4_0.gguf
mkdir -p "$(dirname "$model")"
[ -s "$model" ] || "$UMA_BUILD/bin/uma-mkmodel" --preset 8b --type q4_0 --seed 1 -o "$model" >/dev/null
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader >"$out/gpu.txt"
ngpu=$(wc -l <"$out/gpu.txt")
export UMA_BENCH_MODEL=$model
export UMA_AGENT_GPUS=${UMA_AGENT_GPUS:-$(seq -s ' ' 0 $((ngpu - 1)))}
export UMA_CLUSTER_AGENTS=${UMA_CLUSTER_AGENTS:-$ngpu}
export UMA_CLUSTER_GROUPS=${UMA_CLUSTER_GROUPS:-12} UMA_CLUSTER_USERS=${UMA_CLUSTER_USERS:-2}
export UMA_CLUSTER_PREFIX=${UMA_CLUSTER_PREFIX:-4000} UMA_CLUSTER_REQUESTS=${UMA_CLUSTER_REQUESTS:-240}
export UMA_CLUSTER_CONC=${UMA_CLUSTER_CONC:-8} UMA_CLUSTER_SESSIONS=${UMA_CLUSTER_SESSIONS:-8}
export UMA_BENCH_CTX=${UMA_BENCH_CTX:-65536}
export UMA_AGENT_EXTRA=${UMA_AGENT_EXTRA:---prefix-cache-seqs 8 --prefix-cache-mb 0}
export UMA_CLUSTER_POLICIES=${UMA_CLUSTER_POLICIES:-predicted round-robin}
export UMA_CLUSTER_OVERHEAD=${UMA_CLUSTER_OVERHEAD:-0}
echo "$ngpu GPU(s): $(head -1 "$out/gpu.txt"); agents on GPUs $UMA_AGENT_GPUS" >&2
bench/cluster.sh "$out"
