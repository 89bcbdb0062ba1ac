#!/usr/bin/env bash
# GPU serving benchmark, one command on a machine with an NVIDIA GPU:
#   bench/gpu.sh [OUT_DIR]          (default build-cuda/bench-gpu)
# Builds llama.cpp with CUDA and the project against it (UMA_GPU=cuda; UMA_BUNDLE=DIR sets up
# offline from scripts/bundle.sh's output), makes the 1B-shape Q8_0 model, then on the same model
# file, context and GPU: llama-bench tg (the c=1 reference), llama-batched-bench S_TG (the decode
# limit at each batch), llama-server (-np = the largest c, its default per-sequence KV) and umad
# (defaults; at c=64 also prefix cache off, unified KV, greedy sampled on the host, and every decode
# timed; pipelined ticks off, speculation off), with identical uma-bench workloads: c streams,
# 128-word prompts, 128 tokens out, 4c
# requests (2c at c=1); then an 8B-shape Q4_0 model at c=64, and bench/gpu_prefix.sh's 8B rows
# (shared prefix, cold long prompts, room per request). Prints the ratio tables last; JSON per
# run and two plots (throughput.svg, itl.svg: tok/s and ITL against c) in OUT_DIR.
# Env: UMA_GPU_BENCH_CONC ("1 16 64 128"), UMA_GPU_BENCH_8B (1; 0 skips the 8B model),
# UMA_BENCH_PORT (18080), UMA_BENCH_MODEL (1B Q8_0).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
export UMA_GPU=${UMA_GPU:-cuda}
bdir=build-$UMA_GPU
out=${1:-$bdir/bench-gpu}
read -r -a conc <<<"${UMA_GPU_BENCH_CONC:-1 16 64 128}"
port=${UMA_BENCH_PORT:-18080}
mkdir -p "$out"
log() { printf '\n== %s\n' "$*" >&2; }
cmax=${conc[-1]}
# The variants (prefix cache off, unified KV, timed decodes) and the 8B model run at c=64 (the
# c that docs/BENCHMARKS.md reports), or at the largest c when 64 is not among them.
cref=$cmax; for c in "${conc[@]}"; do [ "$c" = 64 ] && cref=64; done
ctx=$((cmax * 512 > 8192 ? cmax * 512 : 8192))

log "setup: llama.cpp ($UMA_GPU) and the project in $bdir/"
scripts/setup.sh llama-bench llama-server llama-batched-bench >/dev/null
cmake -S . -B "$bdir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DUMA_BUILD_TESTS=OFF >/dev/null
cmake --build "$bdir" -j "$(nproc)" --target umad uma-bench uma-mkmodel uma-cli >/dev/null
L=$(scripts/llama.sh --print-root)/build/bin
model=${UMA_BENCH_MODEL:-$bdir/models/1b-q8_0.gguf}
if [ ! -s "$model" ]; then
  mkdir -p "$(dirname "$model")"
  "$bdir/bin/uma-mkmodel" --preset 1b --type q8_0 --seed 1 -o "$model" >/dev/null
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >"$out/gpu.txt" 2>/dev/null || echo unknown >"$out/gpu.txt"

log "physical references: llama-bench tg128, llama-batched-bench S_TG (B = ${conc[*]})"
"$L/llama-bench" -m "$model" -ngl 999 -p 0 -n 128 -r 3 -o json >"$out/llama-bench.json" 2>/dev/null
"$L/llama-batched-bench" -m "$model" -ngl 999 -c "$ctx" -npp 128 -ntg 128 -npl "$(IFS=,; echo "${conc[*]}")" \
  --output-format jsonl 2>/dev/null | grep '^{' >"$out/llama-batched-bench.jsonl"

wait_ready() {
  for _ in $(seq 1200); do eval "$1" >/dev/null 2>&1 && return 0; sleep 0.1; done
  echo "server did not come up" >&2; return 1
}
health="python3 -c 'import urllib.request,sys; sys.exit(urllib.request.urlopen(\"http://127.0.0.1:$port/health\").status != 200)'"
bench() {  # $1 = name, $2 = target, $3 = concurrency
  local n=$(($3 * 4)); [ "$3" = 1 ] && n=2
  "$bdir/bin/uma-bench" --target "$2" --json --workload random -c "$3" -n "$n" --seed $((100 + $3)) \
    --prompt-tokens 128 --output-tokens 128 >"$out/$1-c$3.json"
}

log "llama-server -np $cmax -c $ctx"
"$L/llama-server" -m "$model" -ngl 999 -c "$ctx" -np "$cmax" --host 127.0.0.1 --port "$port" --no-webui \
  >"$out/llama-server.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
wait_ready "$health"
for c in "${conc[@]}"; do bench llama-server "http://127.0.0.1:$port" "$c"; done
kill -TERM $pid; wait $pid || true

run_umad() {  # $1 = name, then umad flags
  local name=$1; shift
  log "umad ($name): --n-ctx $ctx --max-sessions $cmax $*"
  "$bdir/bin/umad" --model "${model}" --socket "$out/umad.sock" --n-ctx "$ctx" --max-sessions "$cmax" \
    --http "127.0.0.1:$port" "$@" 2>"$out/$name.log" &
  pid=$!
  wait_ready "$health"
}
run_umad umad
for c in "${conc[@]}"; do
  bench umad-uds "uds:$out/umad.sock" "$c"
  bench umad-http "http://127.0.0.1:$port" "$c"
done
UMA_SOCK="$out/umad.sock" "$bdir/bin/uma-cli" metrics >"$out/umad-metrics.json"
kill -TERM $pid; wait $pid || true
run_umad umad-nocache --no-prefix-cache
bench umad-nocache-uds "uds:$out/umad.sock" "$cref"
kill -TERM $pid; wait $pid || true
run_umad umad-unified --kv-layout unified
bench umad-unified-uds "uds:$out/umad.sock" "$cref"
kill -TERM $pid; wait $pid || true
run_umad umad-hostsampling --backend-sampling off
bench umad-hostsampling-uds "uds:$out/umad.sock" "$cref"
kill -TERM $pid; wait $pid || true
# The pipelined tick and speculation (prompt lookup, verified on the device), each off alone.
run_umad umad-nopipe --no-pipelined-ticks
for c in 1 "$cref"; do bench umad-nopipe-uds "uds:$out/umad.sock" "$c"; done
kill -TERM $pid; wait $pid || true
run_umad umad-nospec --speculative off
for c in 1 "$cref"; do bench umad-nospec-uds "uds:$out/umad.sock" "$c"; done
kill -TERM $pid; wait $pid || true
# Where a tick's time goes: every decode synchronised and timed (slower than the runs above).
UMA_DECODE_TIMING=1 run_umad umad-timing
bench umad-timing-uds "uds:$out/umad.sock" "$cref"
kill -TERM $pid; wait $pid || true
grep 'decode timing' "$out/umad-timing.log" | tail -2 >"$out/decode-timing.txt" || true

# An 8B-shape model at Q4_0 (Llama 3 8B's layers, this tool's 32k vocabulary; ~4 GB, made once):
# llama-bench tg, S_TG at c=64, umad at c=64. UMA_GPU_BENCH_8B=0 skips it.
if [ "${UMA_GPU_BENCH_8B:-1}" = 1 ]; then
  m8=$bdir/models/8b-q4_0.gguf
  [ -s "$m8" ] || "$bdir/bin/uma-mkmodel" --preset 8b --type q4_0 --seed 1 -o "$m8" >/dev/null
  log "8B Q4_0: llama-bench tg128, S_TG B=$cref, umad c=$cref"
  "$L/llama-bench" -m "$m8" -ngl 999 -p 0 -n 128 -r 2 -o json >"$out/8b-llama-bench.json" 2>/dev/null
  "$L/llama-batched-bench" -m "$m8" -ngl 999 -c "$((cref * 512))" -npp 128 -ntg 128 -npl "$cref" \
    --output-format jsonl 2>/dev/null | grep '^{' >"$out/8b-llama-batched-bench.jsonl"
  model=$m8 run_umad umad-8b
  bench umad-8b-uds "uds:$out/umad.sock" "$cref"
  kill -TERM $pid; wait $pid || true
fi
trap - EXIT

PYTHONPATH=$root/bench python3 - "$out" "$cref" "${conc[@]}" <<'PY'
import json, os, sys
out, cref, conc = sys.argv[1], int(sys.argv[2]), [int(c) for c in sys.argv[3:]]
def run(name):
    return json.load(open(os.path.join(out, name + ".json")))["runs"][0]
tg = json.load(open(os.path.join(out, "llama-bench.json")))[0]["avg_ts"]
stg, spp = {}, {}
for line in open(os.path.join(out, "llama-batched-bench.jsonl")):
    j = json.loads(line)
    stg[j["pl"]] = j["speed_tg"]
    spp[j["pl"]] = j["speed_pp"]
def limit(c, r):
    # The workload's limit: each request's prompt at S_PP and its output at S_TG (batched-bench,
    # same c), one after the other: output tok/s <= 1 / (prompt/output / S_PP + 1 / S_TG).
    if c not in stg or c not in spp: return float("nan")
    return 1.0 / (r["prompt_tokens"] / r["output_tokens"] / spp[c] + 1.0 / stg[c])
print("GPU:", open(os.path.join(out, "gpu.txt")).read().strip())
print(f"llama-bench tg128 {tg:.0f} t/s; llama-batched-bench S_TG " + ", ".join(f"B={b} {v:.0f}" for b, v in sorted(stg.items())))
print("\n| c | S_TG | limit (S_PP + S_TG) | llama-server tok/s (ITL p50/p99/max ms) | umad UDS tok/s (ITL p50/p99/max ms) | umad HTTP tok/s | umad/llama-server | umad/S_TG | umad/limit |")
print("|---|---|---|---|---|---|---|---|---|")
for c in conc:
    l, u, h = run(f"llama-server-c{c}"), run(f"umad-uds-c{c}"), run(f"umad-http-c{c}")
    s, lim = stg.get(c, float("nan")), limit(c, u)
    print(f"| {c} | {s:.0f} | {lim:.0f} | {l['output_tok_s']:.0f} ({l['itl_ms']['p50']:.1f}/{l['itl_ms']['p99']:.1f}/{l['itl_ms']['max']:.1f}) | "
          f"{u['output_tok_s']:.0f} ({u['itl_ms']['p50']:.1f}/{u['itl_ms']['p99']:.1f}/{u['itl_ms']['max']:.1f}) | {h['output_tok_s']:.0f} | "
          f"{u['output_tok_s'] / l['output_tok_s']:.2f} | {u['output_tok_s'] / s:.2f} | {u['output_tok_s'] / lim:.2f} |")
for name, what in (("nopipe", "pipelined ticks off"), ("nospec", "speculation off")):
    for c in sorted({1, cref}):
        if not os.path.exists(os.path.join(out, f"umad-{name}-uds-c{c}.json")): continue
        u, v = run(f"umad-uds-c{c}"), run(f"umad-{name}-uds-c{c}")
        print(f"{what} at c={c}: {v['output_tok_s']:.0f} tok/s (ITL p50/p99 {v['itl_ms']['p50']:.2f}/{v['itl_ms']['p99']:.1f} ms); "
              f"default {u['output_tok_s']:.0f} (ITL p50/p99 {u['itl_ms']['p50']:.2f}/{u['itl_ms']['p99']:.1f}): default/{name} {u['output_tok_s'] / v['output_tok_s']:.3f}")
c = cref
n, u = run(f"umad-nocache-uds-c{c}"), run(f"umad-uds-c{c}")
print(f"\nprefix cache at c={c}: on {u['output_tok_s']:.0f} tok/s (ITL p99 {u['itl_ms']['p99']:.1f} ms), "
      f"off {n['output_tok_s']:.0f} tok/s (ITL p99 {n['itl_ms']['p99']:.1f} ms): on/off {u['output_tok_s'] / n['output_tok_s']:.2f}")
u = run(f"umad-unified-uds-c{c}")
print(f"unified KV at c={c}: {u['output_tok_s']:.0f} tok/s (ITL p50/p99 {u['itl_ms']['p50']:.1f}/{u['itl_ms']['p99']:.1f} ms)")
h = run(f"umad-hostsampling-uds-c{c}")
print(f"greedy sampled on the host at c={c}: {h['output_tok_s']:.0f} tok/s (ITL p50/p99 {h['itl_ms']['p50']:.1f}/{h['itl_ms']['p99']:.1f} ms)")
print("decode timing at c=%d (synchronised):" % c, open(os.path.join(out, "decode-timing.txt")).read().strip())
m = json.load(open(os.path.join(out, "umad-metrics.json")))
print(f"umad after all runs: prefill floor {m['tick_prefill_floor']} tokens, fitted fixed prefill cost "
      f"{m['prefill_fixed_ms']:.2f} ms, kv moves {m['kv_sequence_moves_total']}, prefix kept/not kept/hits "
      f"{m['prefix_cache']['kept_sequences']}/{m['prefix_cache']['not_kept_total']}/{m['prefix_cache']['hits_total']}")
if os.path.exists(os.path.join(out, "umad-8b-uds-c%d.json" % c)):
    tg8 = json.load(open(os.path.join(out, "8b-llama-bench.json")))[0]["avg_ts"]
    s8 = json.loads(open(os.path.join(out, "8b-llama-batched-bench.jsonl")).readline())["speed_tg"]
    u8 = run(f"umad-8b-uds-c{c}")
    print(f"8B Q4_0: llama-bench tg128 {tg8:.0f} t/s; S_TG B={c} {s8:.0f}; umad c={c} {u8['output_tok_s']:.0f} tok/s "
          f"(ITL p50/p99 {u8['itl_ms']['p50']:.1f}/{u8['itl_ms']['p99']:.1f} ms) = {u8['output_tok_s'] / s8:.2f} x S_TG")
if 1 in conc:
    print(f"c=1: umad {run('umad-uds-c1')['output_tok_s']:.0f} tok/s = {run('umad-uds-c1')['output_tok_s'] / tg:.2f} x llama-bench tg"
          f" (S_TG B=1 {stg.get(1, float('nan')):.0f})")
    # tok/s counts each request's prefill, which tg does not: the decode alone is one token per ITL.
    for name in ("umad-uds-c1", "umad-nospec-uds-c1"):
        if os.path.exists(os.path.join(out, name + ".json")):
            itl = run(name)['itl_ms']
            print(f"c=1 decode ({name}): 1/ITL p50 {1000 / itl['p50']:.0f}, 1/ITL mean {1000 / itl['mean']:.0f} tok/s"
                  f" = {1000 / itl['p50'] / tg:.2f} / {1000 / itl['mean'] / tg:.2f} x llama-bench tg")
import svg_plot
gpu = open(os.path.join(out, "gpu.txt")).read().split(",")[0].strip()
svg_plot.lines(os.path.join(out, "throughput.svg"), f"Output tok/s ({gpu})", "concurrent streams", "tok/s", conc,
               {"umad (Unix socket)": [run(f"umad-uds-c{c}")["output_tok_s"] for c in conc],
                "umad (HTTP)": [run(f"umad-http-c{c}")["output_tok_s"] for c in conc],
                "llama-server": [run(f"llama-server-c{c}")["output_tok_s"] for c in conc],
                "S_TG (decode limit)": [stg.get(c) for c in conc]})
svg_plot.lines(os.path.join(out, "itl.svg"), f"Inter-token latency ({gpu})", "concurrent streams", "ms", conc,
               {"umad p50": [run(f"umad-uds-c{c}")["itl_ms"]["p50"] for c in conc],
                "umad p99": [run(f"umad-uds-c{c}")["itl_ms"]["p99"] for c in conc],
                "llama-server p50": [run(f"llama-server-c{c}")["itl_ms"]["p50"] for c in conc],
                "llama-server p99": [run(f"llama-server-c{c}")["itl_ms"]["p99"] for c in conc]})
print(f"plots: {out}/throughput.svg, {out}/itl.svg")
PY
# The 8B rows: a shared prefix, one stream at a time, cold long prompts, room per request.
if [ "${UMA_GPU_BENCH_8B:-1}" = 1 ]; then bench/gpu_prefix.sh "$out/prefix"; fi
