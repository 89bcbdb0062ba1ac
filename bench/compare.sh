#!/usr/bin/env bash
# One command: umad vs llama-server on the same model file, threads and context, same workloads,
# plus llama.cpp's physical references (llama-bench pp/tg, llama-batched-bench S_TG), a ratio table
# and PNG plots.
#   bench/compare.sh [OUT_DIR]      (default build/bench-results)
# Env: UMA_BENCH_THREADS (2), UMA_BENCH_CTX (40960: per-sequence KV gives each of 16 sessions 2560 cells), UMA_BENCH_MODEL (small preset, Q8_0),
#      UMA_BENCH_QUICK=1 (fewer requests: a smoke run of the whole pipeline).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
out=${1:-build/bench-results}
threads=${UMA_BENCH_THREADS:-2}
ctx=${UMA_BENCH_CTX:-40960}  # per-sequence KV: 2560 cells for each of 16 sessions (the 2000-token prompts fit)
quick=${UMA_BENCH_QUICK:-0}
mkdir -p "$out"
log() { printf '\n== %s\n' "$*" >&2; }

log "setup: llama.cpp tools from the pinned source, our binaries"
scripts/setup.sh llama-bench llama-server llama-batched-bench
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "$(nproc)" --target umad uma-bench uma-mkmodel uma-cli
L=$(scripts/llama.sh --print-root)/build/bin
model=${UMA_BENCH_MODEL:-build/models/small-q8_0.gguf}
[ -s "$model" ] || build/bin/uma-mkmodel --preset small --type q8_0 --seed 1 -o "$model" >/dev/null

log "physical references: llama-bench, llama-batched-bench ($model, $threads threads)"
"$L/llama-bench" -m "$model" -t "$threads" -p 128 -n 64 -r 3 -o json >"$out/llama-bench.json" 2>/dev/null
"$L/llama-batched-bench" -m "$model" -t "$threads" -c "$ctx" -npp 128 -ntg 64 -npl 1,4,8,16 \
  --output-format jsonl 2>/dev/null | grep '^{' >"$out/llama-batched-bench.jsonl"

# Workloads: name and uma-bench arguments (the same for both servers).
if [ "$quick" = 1 ]; then
  conc=(1 4); n_of() { echo $(( $1 < 2 ? 2 : $1 )); }; mixed_d=8; prefix_n=4
else
  conc=(1 4 8 16); n_of() { echo $(( $1 * 2 < 4 ? 4 : $1 * 2 )); }; mixed_d=30; prefix_n=8
fi
run_workloads() {  # $1 = name, $2 = target
  local name=$1 target=$2
  for c in "${conc[@]}"; do
    # A seed per run: llama-server's RAM prompt cache would otherwise replay earlier runs' prompts.
    build/bin/uma-bench --target "$target" --json --workload random -c "$c" -n "$(n_of "$c")" --seed "$((100 + c))" \
      --prompt-tokens 128 --output-tokens 64 >"$out/$name-c$c.json"
  done
  build/bin/uma-bench --target "$target" --json --workload mixed -c 8 -d "$mixed_d" --seed 7 --prompt-tokens 32 \
    --output-tokens 64 --background-prompt-tokens 2000 --background-output-tokens 8 --background-every-s 10 \
    >"$out/$name-mixed.json"
  build/bin/uma-bench --target "$target" --json --workload shared-prefix -c 8 -n "$prefix_n" --seed 9 --prefix-tokens 1000 \
    --suffix-tokens 30 --output-tokens 32 >"$out/$name-prefix.json"
}

wait_ready() {  # $1 = command that succeeds once the server answers
  for _ in $(seq 600); do eval "$1" >/dev/null 2>&1 && return 0; sleep 0.1; done
  echo "server did not come up" >&2; return 1
}

log "umad: --threads $threads --n-ctx $ctx --max-sessions 16"
sock="$out/umad.sock"
build/bin/umad --model "$model" --socket "$sock" --threads "$threads" --n-ctx "$ctx" --max-sessions 16 \
  --max-tokens 512 2>"$out/umad.log" &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
wait_ready "build/bin/uma-cli -s $sock metrics"
run_workloads umad "uds:$sock"
kill -TERM $pid; wait $pid || true

log "llama-server: -t $threads -c $ctx -np 16 --kv-unified"
port=${UMA_BENCH_PORT:-18080}
"$L/llama-server" -m "$model" -t "$threads" -c "$ctx" -np 16 -kvu --host 127.0.0.1 --port "$port" --no-webui \
  >"$out/llama-server.log" 2>&1 &
pid=$!
wait_ready "python3 -c 'import urllib.request,sys; sys.exit(urllib.request.urlopen(\"http://127.0.0.1:$port/health\").status != 200)'"
run_workloads llama-server "http://127.0.0.1:$port"
kill -TERM $pid; wait $pid || true
trap - EXIT

log "report"
python3 bench/report.py "$out" "${conc[@]}" | tee "$out/report.md"
