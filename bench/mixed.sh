#!/usr/bin/env bash
# Interactive streams while long prompts arrive, umad vs llama-server in one run
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
# shellcheck source=bench/lib.sh
source bench/lib.sh
out=${1:-build/bench-mixed}
secs=${UMA_MIXED_SECONDS:-40}
streams=${UMA_MIXED_STREAMS:-8}
long=${UMA_MIXED_LONG:-2000}
every=${UMA_MIXED_EVERY:-15}
mkdir -p "$out"
bench_setup llama-server

mixed() {  # $1 = name, $2 = target
  build/bin/uma-bench --target "$2" --json --workload mixed -c "$streams" -d "$secs" --seed 7 --prompt-tokens 32 \
    --output-tokens 64 --background-prompt-tokens "$long" --background-output-tokens 8 --background-every-s "$every" \
    --background-start-s 8 >"$out/$1.json"
}

# shellcheck disable=SC2086
start_umad "$out/umad.sock" "$out/umad.log" ${UMA_UMAD_ARGS:-}
mixed umad "uds:$out/umad.sock"
stop_server

start_llama_server "$out/llama-server.log"
mixed llama-server "http://127.0.0.1:$port"
stop_server

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
