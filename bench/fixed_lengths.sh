#!/usr/bin/env bash
# Fixed output lengths, as benchmark clients compare servers (ignore_eos): uma-bench drives umad and
# llama-server over the same OpenAI HTTP API, same model file, threads and context, same run;
# every request must generate exactly --output-tokens (checked from the servers' own usage).
#   bench/fixed_lengths.sh [OUT_DIR]      (default build/bench-results/fixed)
# Env: as bench/lib.sh; UMA_FIXED_CONC ("1 4 16"), UMA_FIXED_OUT (64), UMA_FIXED_PROMPT (128).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
source bench/lib.sh
out=${1:-build/bench-results/fixed}
mkdir -p "$out"
conc=(${UMA_FIXED_CONC:-1 4 16})
n_out=${UMA_FIXED_OUT:-64}
n_in=${UMA_FIXED_PROMPT:-128}
bench_setup llama-server
run() {  # $1 name
  for c in "${conc[@]}"; do
    n=$(( c * 2 < 4 ? 4 : c * 2 ))
    build/bin/uma-bench --target "http://127.0.0.1:$port" --json --workload random -c "$c" -n "$n" --seed $((300 + c)) \
      --prompt-tokens "$n_in" --output-tokens "$n_out" --ignore-eos >"$out/$1-c$c.json"
  done
}
log "umad --http 127.0.0.1:$port"
build/bin/umad --model "$model" --socket "$out/umad.sock" --http "127.0.0.1:$port" --threads "$threads" --n-ctx "$ctx" \
  --max-sessions 16 --max-tokens 512 2>"$out/umad.log" &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
wait_ready "python3 -c 'import urllib.request,sys; sys.exit(urllib.request.urlopen(\"http://127.0.0.1:$port/health\").status != 200)'"
run umad
stop_server
start_llama_server "$out/llama-server.log"
run llama-server
stop_server
python3 - "$out" "$n_out" "${conc[@]}" <<'PY'
import json, sys, pathlib
d, n_out, conc = pathlib.Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
print("| c | umad tok/s | llama-server tok/s | ratio | umad TTFT p50 ms | llama-server TTFT p50 ms | tokens/request (umad, llama-server) | errors |")
print("|---|---|---|---|---|---|---|---|")
for c in conc:
    u = json.loads((d / f"umad-c{c}.json").read_text())["runs"][0]
    l = json.loads((d / f"llama-server-c{c}.json").read_text())["runs"][0]
    per = lambda r: r["output_tokens"] / max(1, r["ok"])
    print(f"| {c} | {u['output_tok_s']:.1f} | {l['output_tok_s']:.1f} | {u['output_tok_s'] / l['output_tok_s']:.2f} | "
          f"{u['ttft_ms']['p50']:.0f} | {l['ttft_ms']['p50']:.0f} | {per(u):.1f}, {per(l):.1f} (want {n_out}) | "
          f"{sum(u['errors'].values())}, {sum(l['errors'].values())} |")
PY
