#!/usr/bin/env bash
# A shared system prompt (~1000 tokens) + a unique ~30-token suffix, 8
# concurrent streams, on umad with the prefix cache, umad without it, and llama-server, in one run
# on the same model file, threads and context. uma-bench's one warm-up request (same prefix) runs
# first on each server, so every cache starts as a user's would after the first request.
#   bench/prefix.sh [OUT_DIR]      (default build/bench-prefix)
# Env: bench/lib.sh's, UMA_PREFIX_REQUESTS (16), UMA_PREFIX_WARMUP (1; 0: every cache starts cold).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
# shellcheck source=bench/lib.sh
source bench/lib.sh
out=${1:-build/bench-prefix}
n=${UMA_PREFIX_REQUESTS:-16}
warmup=${UMA_PREFIX_WARMUP:-1}
mkdir -p "$out"
bench_setup llama-server

prefix_run() {  # $1 = name, $2 = target
  build/bin/uma-bench --target "$2" --json --workload shared-prefix -c 8 -n "$n" --seed 9 --prefix-tokens 1000 \
    --suffix-tokens 30 --output-tokens 32 --warmup "$warmup" >"$out/$1.json"
}
umad_run() {  # $1 = name, then extra umad flags
  local name=$1; shift
  start_umad "$out/umad.sock" "$out/$name.log" "$@"
  prefix_run "$name" "uds:$out/umad.sock"
  build/bin/uma-cli -s "$out/umad.sock" metrics >"$out/$name-metrics.json"
  stop_server
}
umad_run umad-cache
umad_run umad-nocache --no-prefix-cache

start_llama_server "$out/llama-server.log"
prefix_run llama-server "http://127.0.0.1:$port"
stop_server

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
