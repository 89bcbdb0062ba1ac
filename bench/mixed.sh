#!/usr/bin/env bash
# Issue 5's benchmark: interactive streams while long prompts arrive, umad vs llama-server in one run
# on the same model file, threads and context. Reports each server's interactive inter-token gaps,
# steady (no long prompt in prefill) and during a long prompt's prefill, and their ratio.
#   bench/mixed.sh [OUT_DIR]      (default build/bench-mixed)
# The first long prompt arrives after 8 s of steady streaming; then one every UMA_MIXED_EVERY s.
# Env: UMA_BENCH_THREADS (2), UMA_BENCH_CTX (16384), UMA_BENCH_MODEL (small preset, Q8_0),
#      UMA_MIXED_SECONDS (40), UMA_MIXED_STREAMS (8), UMA_MIXED_LONG (2000 tokens), UMA_MIXED_EVERY (15 s),
#      UMA_UMAD_ARGS (extra umad flags).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
out=${1:-build/bench-mixed}
threads=${UMA_BENCH_THREADS:-2}
ctx=${UMA_BENCH_CTX:-16384}
secs=${UMA_MIXED_SECONDS:-40}
streams=${UMA_MIXED_STREAMS:-8}
long=${UMA_MIXED_LONG:-2000}
every=${UMA_MIXED_EVERY:-15}
mkdir -p "$out"
log() { printf '\n== %s\n' "$*" >&2; }

scripts/setup.sh llama-server >/dev/null
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "$(nproc)" --target umad uma-bench uma-mkmodel uma-cli >/dev/null
L=$(scripts/llama.sh --print-root)/build/bin
model=${UMA_BENCH_MODEL:-build/models/small-q8_0.gguf}
[ -s "$model" ] || build/bin/uma-mkmodel --preset small --type q8_0 --seed 1 -o "$model" >/dev/null

mixed() {  # $1 = name, $2 = target
  build/bin/uma-bench --target "$2" --json --workload mixed -c "$streams" -d "$secs" --seed 7 --prompt-tokens 32 \
    --output-tokens 64 --background-prompt-tokens "$long" --background-output-tokens 8 --background-every-s "$every" --background-start-s 8 \
    >"$out/$1.json"
}
wait_ready() {
  for _ in $(seq 600); do eval "$1" >/dev/null 2>&1 && return 0; sleep 0.1; done
  echo "server did not come up" >&2; return 1
}

log "umad: --threads $threads --n-ctx $ctx --max-sessions 16 ${UMA_UMAD_ARGS:-}"
sock="$out/umad.sock"
# shellcheck disable=SC2086
build/bin/umad --model "$model" --socket "$sock" --threads "$threads" --n-ctx "$ctx" --max-sessions 16 \
  --max-tokens 512 ${UMA_UMAD_ARGS:-} 2>"$out/umad.log" &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
wait_ready "build/bin/uma-cli -s $sock metrics"
mixed umad "uds:$sock"
kill -TERM $pid; wait $pid || true

log "llama-server: -t $threads -c $ctx -np 16 --kv-unified"
port=${UMA_BENCH_PORT:-18080}
"$L/llama-server" -m "$model" -t "$threads" -c "$ctx" -np 16 -kvu --host 127.0.0.1 --port "$port" --no-webui \
  >"$out/llama-server.log" 2>&1 &
pid=$!
wait_ready "python3 -c 'import urllib.request,sys; sys.exit(urllib.request.urlopen(\"http://127.0.0.1:$port/health\").status != 200)'"
mixed llama-server "http://127.0.0.1:$port"
kill -TERM $pid; wait $pid || true
trap - EXIT

python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
print(f"{'server':13} {'steady ITL p50':>15} {'ITL during long prefill p50/p99/max':>37} {'max/steady':>10} "
      f"{'interactive tok/s':>18} {'long-prompt TTFT p50':>21}")
for name in ("umad", "llama-server"):
    j = json.load(open(f"{out}/{name}.json"))
    s = j["interactive_itl_split"]
    runs = {r["label"]: r for r in j["runs"]}
    st, du = s["steady_ms"], s["during_prefill_ms"]
    ratio = du["max"] / st["p50"] if st["p50"] else float("nan")
    print(f"{name:13} {st['p50']:15.0f} {du['p50']:>15.0f} / {du['p99']:.0f} / {du['max']:.0f}{'':8} {ratio:10.2f} "
          f"{runs['interactive']['output_tok_s']:18.1f} {runs['background']['ttft_ms']['p50']:21.0f}")
PY
