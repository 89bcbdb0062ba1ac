#!/usr/bin/env bash
# Issue 6's benchmark: a shared system prompt (~1000 tokens) + a unique ~30-token suffix, 8
# concurrent streams, on umad with the prefix cache, umad without it, and llama-server, in one run
# on the same model file, threads and context. uma-bench's one warm-up request (same prefix) runs
# first on each server, so every cache starts as a user's would after the first request.
#   bench/prefix.sh [OUT_DIR]      (default build/bench-prefix)
# Env: UMA_BENCH_THREADS (2), UMA_BENCH_CTX (16384), UMA_BENCH_MODEL (small preset, Q8_0),
#      UMA_PREFIX_REQUESTS (16).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
out=${1:-build/bench-prefix}
threads=${UMA_BENCH_THREADS:-2}
ctx=${UMA_BENCH_CTX:-16384}
n=${UMA_PREFIX_REQUESTS:-16}
mkdir -p "$out"
log() { printf '\n== %s\n' "$*" >&2; }

scripts/setup.sh llama-server >/dev/null
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "$(nproc)" --target umad uma-bench uma-mkmodel uma-cli >/dev/null
L=$(scripts/llama.sh --print-root)/build/bin
model=${UMA_BENCH_MODEL:-build/models/small-q8_0.gguf}
[ -s "$model" ] || build/bin/uma-mkmodel --preset small --type q8_0 --seed 1 -o "$model" >/dev/null

prefix_run() {  # $1 = name, $2 = target
  build/bin/uma-bench --target "$2" --json --workload shared-prefix -c 8 -n "$n" --seed 9 --prefix-tokens 1000 \
    --suffix-tokens 30 --output-tokens 32 >"$out/$1.json"
}
wait_ready() {
  for _ in $(seq 600); do eval "$1" >/dev/null 2>&1 && return 0; sleep 0.1; done
  echo "server did not come up" >&2; return 1
}
umad_run() {  # $1 = name, $2.. = extra flags
  local name=$1; shift
  log "umad ($name): --threads $threads --n-ctx $ctx --max-sessions 16 $*"
  local sock="$out/umad.sock"
  build/bin/umad --model "$model" --socket "$sock" --threads "$threads" --n-ctx "$ctx" --max-sessions 16 \
    --max-tokens 512 "$@" 2>"$out/$name.log" &
  pid=$!
  wait_ready "build/bin/uma-cli -s $sock metrics"
  prefix_run "$name" "uds:$sock"
  build/bin/uma-cli -s "$sock" metrics >"$out/$name-metrics.json"
  kill -TERM $pid; wait $pid || true
}
trap 'kill ${pid:-0} 2>/dev/null || true' EXIT
umad_run umad-cache
umad_run umad-nocache --no-prefix-cache

log "llama-server: -t $threads -c $ctx -np 16 --kv-unified"
port=${UMA_BENCH_PORT:-18080}
"$L/llama-server" -m "$model" -t "$threads" -c "$ctx" -np 16 -kvu --host 127.0.0.1 --port "$port" --no-webui \
  >"$out/llama-server.log" 2>&1 &
pid=$!
wait_ready "python3 -c 'import urllib.request,sys; sys.exit(urllib.request.urlopen(\"http://127.0.0.1:$port/health\").status != 200)'"
prefix_run llama-server "http://127.0.0.1:$port"
kill -TERM $pid; wait $pid || true
trap - EXIT

python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
rows = {}
for name in ("umad-cache", "umad-nocache", "llama-server"):
    r = json.load(open(f"{out}/{name}.json"))["runs"][0]
    rows[name] = r
ref = rows["llama-server"]["ttft_ms"]["p50"]
print(f"{'server':13} {'TTFT p50 ms':>12} {'p90':>8} {'max':>8} {'out tok/s':>10} {'TTFT p50 / llama-server':>24}")
for name, r in rows.items():
    t = r["ttft_ms"]
    print(f"{name:13} {t['p50']:12.0f} {t['p90']:8.0f} {t['max']:8.0f} {r['output_tok_s']:10.1f} {t['p50'] / ref:24.2f}")
m = json.load(open(f"{out}/umad-cache-metrics.json")).get("prefix_cache", {})
print("umad prefix cache:", json.dumps(m))
PY
