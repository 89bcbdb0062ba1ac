#!/usr/bin/env bash
# A cold model's start on one agent, from its DRAM tier to the first token, against llama-server's
# start on the same file (page cache warm), in one run:
#   fresh+map      a umad spawned per load, llama.cpp uploading its mapping of the image (--no-standby,
#                  umad --no-host-copy)
#   fresh+copy     a umad spawned per load, the image pinned in the umad and copied (--no-standby)
#   standby+copy   the agent's standby umad (GPU contexts ready) takes the load and pins the image
#                  then (--no-standby-pins)
#   standby+pinned ahead  the standby pinned the DRAM tier's image while it waited (the default;
#                  a GPU only: nothing pins on a CPU)
# Each round: unload (wait for the exit), wait for the standby, POST /load, then one token.
# Env: UMA_BUNDLE, UMA_GPU (cuda: build-cuda, 8B Q4_0; else the small Q8_0 on the CPU),
# UMA_COLD_RUNS (5), UMA_COLD_PRESET (8b:q4_0 on a GPU, small:q8_0 otherwise).
set -euo pipefail
cd "$(dirname "$0")/.."
bdir=build${UMA_GPU:+-$UMA_GPU}
runs=${UMA_COLD_RUNS:-5}
preset=${UMA_COLD_PRESET:-$([ -n "${UMA_GPU:-}" ] && echo 8b:q4_0 || echo small:q8_0)}
work=${UMA_COLD_DIR:-$PWD/$bdir/agent-cold}
log() { printf '== %s\n' "$*" >&2; }
scripts/setup.sh llama-server >/dev/null
cmake -S . -B "$bdir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$bdir" -j "$(nproc)" --target umad uma-agent uma-store uma-mkmodel >/dev/null
B=$PWD/$bdir/bin
L=$(scripts/llama.sh --print-root)/build/bin
mkdir -p "$work/models" "$work/run"
model=$work/models/${preset%%:*}-${preset##*:}.gguf
[ -s "$model" ] || "$B/uma-mkmodel" --preset "${preset%%:*}" --type "${preset##*:}" --seed 1 -o "$model" >/dev/null
if ! command -v redis-server >/dev/null; then  # an offline bundle's
  prefix=$(scripts/llama.sh --print-prefix)
  export PATH=$prefix/usr/bin:$PATH LD_LIBRARY_PATH=$prefix/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
fi
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
rport=$(free_port)
redis-server --bind 127.0.0.1 --port "$rport" --save '' --appendonly no >"$work/run/redis.log" 2>&1 &
redis_pid=$!
trap 'kill $redis_pid 2>/dev/null || true' EXIT
for _ in $(seq 100); do redis-cli -p "$rport" ping >/dev/null 2>&1 && break; sleep 0.1; done
"$B/uma-store" add "$model" --id cold --redis "127.0.0.1:$rport" >/dev/null
[ -n "${UMA_GPU:-}" ] && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >&2 || true
log "$(stat -c %s "$model") bytes ($preset), $runs rounds each, $(nproc) cores"
python3 bench/agent_cold.py --agent "$B/uma-agent" --llama-server "$L/llama-server" --model "$model" \
  --redis "127.0.0.1:$rport" --work "$work" --runs "$runs" --threads "${UMA_COLD_THREADS:-$(nproc)}" ${UMA_GPU:+--gpu}
