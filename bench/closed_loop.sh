#!/usr/bin/env bash
# A closed loop and a long prompt on the CPU, one command: 16 clients in a closed loop (128-token prompts, 64 tokens out,
# every request exactly 64: --ignore-eos on both sides), umad over its socket and over HTTP against
# llama-server, same model file, threads and context; then one ~2000-token prompt arriving while 8
# streams decode (its TTFT, and the streams' worst gap while it goes in).
#   bench/closed_loop.sh [OUT_DIR]      (default build/bench-closed-loop)
# Env: bench/lib.sh's; UMA_CL_REQUESTS (48), UMA_CL_FLAGS (extra umad flags), UMA_CL_ROUNDS (1:
# servers alternated this many times, each round a fresh seed), UMA_CL_REPORT_ONLY=1 (the table again).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
# shellcheck source=bench/lib.sh
source bench/lib.sh
out=${1:-build/bench-closed-loop}
n=${UMA_CL_REQUESTS:-48}
rounds=${UMA_CL_ROUNDS:-1}
read -r -a extra <<<"${UMA_CL_FLAGS:-}"
mkdir -p "$out"
[ "${UMA_CL_REPORT_ONLY:-0}" = 1 ] || { rm -f "$out"/*.json; bench_setup llama-server; }
uport=$((port + 1))

run() {  # $1 = name, $2 = target, then uma-bench flags
  local name=$1 target=$2; shift 2
  build/bin/uma-bench --target "$target" --json "$@" >"$out/$name.json"
}
loop() {  # $1 = name, $2 = target, $3 = seed
  run "$1" "$2" --workload random -c 16 -n "$n" --seed "$3" --prompt-tokens 128 --output-tokens 64 --ignore-eos
}
long() {  # $1 = name, $2 = target, $3 = seed: 8 streams, one 2000-token prompt 4 s in
  run "$1" "$2" --workload mixed -c 8 -d 12 --seed "$3" --prompt-tokens 32 --output-tokens 64 \
    --background-prompt-tokens 2000 --background-output-tokens 8 --background-every-s 9 --background-start-s 4
}

for r in $(seq "$rounds"); do
  [ "${UMA_CL_REPORT_ONLY:-0}" = 1 ] && break
  start_umad "$out/umad.sock" "$out/umad-$r.log" --http "127.0.0.1:$uport" "${extra[@]}"
  loop "umad-uds-r$r" "uds:$out/umad.sock" $((200 + r))
  loop "umad-http-r$r" "http://127.0.0.1:$uport" $((300 + r))
  long "umad-long-r$r" "http://127.0.0.1:$uport" $((400 + r))
  stop_server
  start_llama_server "$out/llama-server-$r.log"
  loop "llama-server-r$r" "http://127.0.0.1:$port" $((300 + r))
  long "llama-server-long-r$r" "http://127.0.0.1:$port" $((400 + r))
  stop_server
done

python3 - "$out" "$rounds" <<'PY'
import json, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def r(name):
    return json.load(open(f"{out}/{name}.json"))["runs"][0]
def runs(name):
    return json.load(open(f"{out}/{name}.json"))["runs"]
print("16 clients, closed loop, 128-token prompts, 64 out (--ignore-eos):")
print(f"{'round':5} {'server':13} {'tok/s':>7} {'TTFT p50':>9} {'p95':>7} {'ITL p50':>8} {'p99':>6} {'max':>6}  ratio")
for k in range(1, rounds + 1):
    ls = r(f"llama-server-r{k}")
    for name in ("umad-uds", "umad-http", "llama-server"):
        x = r(f"{name}-r{k}")
        t, i = x["ttft_ms"], x["itl_ms"]
        print(f"{k:5} {name:13} {x['output_tok_s']:7.1f} {t['p50']:9.0f} {t['p95']:7.0f} {i['p50']:8.0f} {i['p99']:6.0f} "
              f"{i['max']:6.0f}  {x['output_tok_s'] / ls['output_tok_s']:.2f}x tok/s, TTFT p95 {t['p95'] / ls['ttft_ms']['p95']:.2f}x, "
              f"ITL p99 {i['p99'] / ls['itl_ms']['p99']:.2f}x")
print("one 2000-token prompt during 8 streams (32-token prompts, 64 out):")
for k in range(1, rounds + 1):
    for name in ("umad-long", "llama-server-long"):
        x, b = runs(f"{name}-r{k}")[:2]
        i = x["itl_ms"]
        print(f"{k:5} {name:18} long TTFT {b['ttft_ms']['p50']:7.0f} ms  streams ITL p50 {i['p50']:.0f} p99 {i['p99']:.0f} max {i['max']:.0f} ms")
PY
