#!/usr/bin/env bash
# The HTTP/SSE front end's costs, one command:
#  1. transport cost per token: one stream on the oracle model (ticks of ~1 ms, so the transport
#     shows), umad over its Unix socket vs over HTTP/SSE, same daemon, same requests;
#  2. 16 concurrent streams over HTTP on both sides: umad --http vs llama-server, same model file,
#     threads and context (and umad over the Unix socket in the same run, for reference).
#   bench/http.sh [OUT_DIR]      (default build/bench-http)
# Env: bench/lib.sh's.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
# shellcheck source=bench/lib.sh
source bench/lib.sh
out=${1:-build/bench-http}
mkdir -p "$out"
bench_setup llama-server
uport=$((port + 1))

run() {  # $1 = name, $2 = target, then uma-bench flags
  local name=$1 target=$2; shift 2
  build/bin/uma-bench --target "$target" --json "$@" >"$out/$name.json"
}

oracle=build/models/oracle.gguf
[ -s "$oracle" ] || build/bin/uma-mkmodel --preset oracle --type f32 --seed 1 -o "$oracle" >/dev/null
real_model=$model
model=$oracle
start_umad "$out/umad.sock" "$out/umad-oracle.log" --http "127.0.0.1:$uport"
for t in uds http; do
  target="uds:$out/umad.sock"; [ "$t" = http ] && target="http://127.0.0.1:$uport"
  run "oracle-$t" "$target" --workload random -c 1 -n 20 --seed 3 --prompt-tokens 16 --output-tokens 256
done
stop_server

model=$real_model
start_umad "$out/umad.sock" "$out/umad.log" --http "127.0.0.1:$uport"
run umad-uds-c16 "uds:$out/umad.sock" --workload random -c 16 -n 32 --seed 116 --prompt-tokens 128 --output-tokens 64
run umad-http-c16 "http://127.0.0.1:$uport" --workload random -c 16 -n 32 --seed 117 --prompt-tokens 128 --output-tokens 64
stop_server
start_llama_server "$out/llama-server.log"
run llama-server-c16 "http://127.0.0.1:$port" --workload random -c 16 -n 32 --seed 117 --prompt-tokens 128 --output-tokens 64
stop_server

python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
def r(name):
    return json.load(open(f"{out}/{name}.json"))["runs"][0]
u, h = r("oracle-uds"), r("oracle-http")
print("one stream, oracle model, 256 tokens x 20 requests:")
for name, x in (("uds", u), ("http", h)):
    print(f"  {name:5} TPOT p50 {x['tpot_ms']['p50']:.3f} ms  ITL p50 {x['itl_ms']['p50']:.3f} p99 {x['itl_ms']['p99']:.3f} ms  "
          f"TTFT p50 {x['ttft_ms']['p50']:.2f} ms  {x['output_tok_s']:.0f} tok/s")
print(f"  HTTP - UDS per token (TPOT p50): {h['tpot_ms']['p50'] - u['tpot_ms']['p50']:+.3f} ms")
print("16 streams, small Q8_0, 128-token prompts, 64 out, 32 requests:")
for name in ("umad-uds-c16", "umad-http-c16", "llama-server-c16"):
    x = r(name)
    print(f"  {name:17} {x['output_tok_s']:6.1f} tok/s  TTFT p50 {x['ttft_ms']['p50']:7.0f} ms  "
          f"ITL p50/p99/max {x['itl_ms']['p50']:.0f}/{x['itl_ms']['p99']:.0f}/{x['itl_ms']['max']:.0f} ms")
PY
