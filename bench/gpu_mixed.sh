#!/usr/bin/env bash
# Mixed load on a GPU, umad against llama-server in one run on the same model file and context per
# slot: S interactive streams (32-token prompts, 128 tokens out, closed loop) while one long prompt
# (UMA_GPU_MIXED_LONG tokens, about 2500 words) arrives after 1 s. Reports the interactive ITL
# p50/p99/max over the whole run and during the long prompt's prefill, interactive tok/s and the
# long prompt's TTFT, each umad row over llama-server's.
#   bench/gpu_mixed.sh [OUT_DIR]      (default build-cuda/bench-gpu-mixed)
# Rows: llama-server (-np S+1, -c (S+1) x ROOM, its defaults: n_batch 2048 over passes of 512),
# then umad's rows named in UMA_GPU_MIXED_ROWS (default "umad umad-unified"): umad its defaults
# (per-sequence KV), umad-balance `--prefill-policy slo-balance` (the least worst SLO ratio, not the
# fullest tick that meets them), umad-unified `--kv-layout unified` (one KV pool: a prompt's
# tokens ride in the decode rows' pass), umad-last-graph `--graphs-kept 0` (llama.cpp keeps only
# its last built graph).
# Env: UMA_GPU (cuda), UMA_BUNDLE (offline setup), UMA_BENCH_MODEL (the 8B-shape Q4_0),
#      UMA_GPU_MIXED_STREAMS (8), UMA_GPU_MIXED_LONG (3300), UMA_GPU_MIXED_SECONDS (12),
#      UMA_GPU_MIXED_ROOM (4096 cells a slot), UMA_GPU_MIXED_RUNS (2: runs of each row, medians),
#      UMA_BENCH_THREADS (8), UMA_BENCH_PORT (18080), UMA_GPU_MIXED_UMAD_LIBS (a folder of llama.cpp's
#      shared libraries umad's rows load instead of the build's: an A/B of a llama.cpp patch of ours
#      against llama-server as upstream builds it).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
export UMA_GPU=${UMA_GPU:-cuda}
bdir=build-$UMA_GPU
out=${1:-$bdir/bench-gpu-mixed}
streams=${UMA_GPU_MIXED_STREAMS:-8}
long=${UMA_GPU_MIXED_LONG:-3300}
secs=${UMA_GPU_MIXED_SECONDS:-12}
room=${UMA_GPU_MIXED_ROOM:-4096}
runs=${UMA_GPU_MIXED_RUNS:-2}
threads=${UMA_BENCH_THREADS:-8}
port=${UMA_BENCH_PORT:-18080}
slots=$((streams + 1))
ctx=$((slots * room))
mkdir -p "$out"
log() { printf '\n== %s\n' "$*" >&2; }

log "setup: llama.cpp ($UMA_GPU) and the project in $bdir/"
scripts/setup.sh llama-server >/dev/null
cmake -S . -B "$bdir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$bdir" -j "$(nproc)" --target umad uma-bench uma-mkmodel >/dev/null
L=$(scripts/llama.sh --print-root)/build/bin
model=${UMA_BENCH_MODEL:-$bdir/models/8b-q4_0.gguf}
if [ ! -s "$model" ]; then
  mkdir -p "$(dirname "$model")"
  "$bdir/bin/uma-mkmodel" --preset 8b --type q4_0 --seed 1 -o "$model" >/dev/null
fi
nvidia-smi --query-gpu=name --format=csv,noheader >"$out/gpu.txt" 2>/dev/null || echo unknown >"$out/gpu.txt"

health="python3 -c 'import urllib.request,sys; sys.exit(urllib.request.urlopen(\"http://127.0.0.1:$port/health\").status != 200)'"
wait_ready() {
  for _ in $(seq 1200); do eval "$health" >/dev/null 2>&1 && return 0; sleep 0.1; done
  echo "server did not come up" >&2; return 1
}
pid=
trap '[ -n "$pid" ] && kill $pid 2>/dev/null || true' EXIT
stop() { kill -TERM "$pid"; wait "$pid" || true; pid=; }
mixed() {  # $1 = row name, $2 = run number
  "$bdir/bin/uma-bench" --target "http://127.0.0.1:$port" --keep-alive --json --workload mixed -c "$streams" \
    -d "$secs" --seed $((7 + $2)) --prompt-tokens 32 --output-tokens 128 --ignore-eos \
    --background-prompt-tokens "$long" --background-output-tokens 8 --background-every-s 1000 \
    --background-start-s 1 >"$out/$1-$2.json"
}
row_llama_server() {
  log "llama-server -np $slots -c $ctx -t $threads"
  "$L/llama-server" -m "$model" -ngl 999 -t "$threads" -c "$ctx" -np "$slots" --host 127.0.0.1 --port "$port" \
    --no-webui >"$out/llama-server.log" 2>&1 &
  pid=$!
  wait_ready
  for r in $(seq "$runs"); do mixed llama-server "$r"; done
  stop
}
row_umad() {  # $1 = row name, then umad flags
  local name=$1; shift
  log "umad ($name): --n-ctx $ctx --max-sessions $slots --threads $threads $*"
  env ${UMA_GPU_MIXED_UMAD_LIBS:+LD_LIBRARY_PATH=$UMA_GPU_MIXED_UMAD_LIBS} \
    "$bdir/bin/umad" --model "$model" --socket "$out/umad.sock" --http "127.0.0.1:$port" --n-ctx "$ctx" \
    --max-sessions "$slots" --threads "$threads" "$@" 2>"$out/$name.log" &
  pid=$!
  wait_ready
  for r in $(seq "$runs"); do mixed "$name" "$r"; done
  stop
}
row_llama_server
rows=${UMA_GPU_MIXED_ROWS:-umad umad-unified}
for name in $rows; do
  case $name in
    umad) row_umad umad ;;
    umad-balance) row_umad umad-balance --prefill-policy slo-balance ;;
    umad-unified) row_umad umad-unified --kv-layout unified ;;
    umad-last-graph) row_umad umad-last-graph --graphs-kept 0 ;;
    *) echo "UMA_GPU_MIXED_ROWS: no row $name" >&2; exit 2 ;;
  esac
done

python3 - "$out" "$runs" "$(cat "$out/gpu.txt")" "$rows" <<'PY'
import json, statistics, sys
out, runs, gpu, rows = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4].split()
def row(name):
    vals = []
    for r in range(1, runs + 1):
        j = json.load(open(f"{out}/{name}-{r}.json"))
        rr = {x["label"]: x for x in j["runs"]}
        it, bg, du = rr["interactive"], rr["background"], j["interactive_itl_split"]["during_prefill_ms"]
        vals.append({"p50": it["itl_ms"]["p50"], "p99": it["itl_ms"]["p99"], "max": it["itl_ms"]["max"],
                     "du_p50": du["p50"], "du_max": du["max"], "du_n": du["n"], "tok_s": it["output_tok_s"],
                     "bg_ttft": bg["ttft_ms"]["p50"], "errors": sum(it["errors"].values()) + sum(bg["errors"].values())})
    return {k: statistics.median(v[k] for v in vals) for k in vals[0]} | {"errors": sum(v["errors"] for v in vals)}
base = row("llama-server")
print(f"GPU: {gpu}; medians of {runs} runs; ratios are the row over llama-server's")
print(f"{'server':15} {'ITL p50':>8} {'p99':>7} {'max':>7} {'prefill p50/max (n)':>20} {'tok/s':>8} {'bg TTFT':>8} | "
      f"{'p99 x':>6} {'max x':>6} {'tok/s x':>7} {'TTFT x':>6} err")
for name in ["llama-server"] + rows:
    r = row(name)
    print(f"{name:15} {r['p50']:8.1f} {r['p99']:7.1f} {r['max']:7.1f} {r['du_p50']:8.1f}/{r['du_max']:.1f} ({r['du_n']:.0f})"
          f" {r['tok_s']:8.1f} {r['bg_ttft']:8.0f} | {r['p99'] / base['p99']:6.2f} {r['max'] / base['max']:6.2f}"
          f" {r['tok_s'] / base['tok_s']:7.2f} {r['bg_ttft'] / base['bg_ttft']:6.2f} {r['errors']}")
PY
