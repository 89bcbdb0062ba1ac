#!/usr/bin/env bash
# The cost of grammar sampling: 16 concurrent streams on one umad, the same requests
# with and without a JSON schema, alternating, same run. The schema (an array of at least 200
# enum items) cannot be finished within max_tokens, so both kinds generate exactly the same number
# of tokens and tok/s compares per-token cost alone.
#   bench/structured.sh [ROUNDS] [OUT_DIR]      (default 2, build/bench-structured)
# Env: bench/lib.sh's; UMA_BENCH_CONC (16), UMA_BENCH_N (32), UMA_BENCH_OUT_TOKENS (64).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
# shellcheck source=bench/lib.sh
source bench/lib.sh
rounds=${1:-2}
out=${2:-build/bench-structured}
conc=${UMA_BENCH_CONC:-16}
n=${UMA_BENCH_N:-32}
tokens=${UMA_BENCH_OUT_TOKENS:-64}
mkdir -p "$out"
bench_setup
cat >"$out/schema.json" <<'JSON'
{"type":"object","properties":{"xs":{"type":"array","items":{"enum":["alpha","beta","gamma","delta"]},"minItems":200}},
 "required":["xs"],"additionalProperties":false}
JSON
start_umad "$out/umad.sock" "$out/umad.log"
run() {  # $1 = name, then extra uma-bench flags
  local name=$1; shift
  build/bin/uma-bench --target "uds:$out/umad.sock" --workload random -c "$conc" -n "$n" --prompt-tokens 64 \
    --output-tokens "$tokens" --warmup 2 --json "$@" >"$out/$name.json"
}
for r in $(seq "$rounds"); do
  run "plain-$r"
  run "schema-$r" --json-schema "$out/schema.json"
done
stop_server
python3 - "$out" "$rounds" <<'PY'
import json, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def load(name):
    return json.load(open(f"{out}/{name}.json"))["runs"][0]
rows = []
for kind in ("plain", "schema"):
    for r in range(1, rounds + 1):
        j = load(f"{kind}-{r}")
        rows.append((kind, r, j["output_tok_s"], j["output_tokens"], j["itl_ms"]["p50"], j["itl_ms"]["p99"], sum(j["errors"].values())))
print("| run | output tok/s | output tokens | ITL p50 / p99 ms | errors |")
print("|---|---|---|---|---|")
for kind, r, tps, toks, p50, p99, err in rows:
    print(f"| {kind} {r} | {tps:.1f} | {toks} | {p50:.1f} / {p99:.1f} | {err} |")
mean = lambda k: sum(t for kind, _, t, *_ in rows if kind == k) / rounds
print(f"\nwith a schema / without: {mean('schema') / mean('plain'):.3f} (tok/s, mean of {rounds} rounds each)")
PY
