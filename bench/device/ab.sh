#!/usr/bin/env bash
# One GPU run after bench/device/build.sh, every row on the same machine and model files:
#   1. c=64 on the 1B Q8_0 (bench/gpu.sh's workload): llama-batched-bench (the workload's limit,
#      S_PP + S_TG), llama-server (the build without PATCH, as upstream), then umad's variants
#      alternated: with and without PATCH, and with each flag set of UMA_AB_FLAGS (';'-separated,
#      on the libraries with it); then the first two (UMA_AB_TIMED) again with every decode timed
#      (UMA_DECODE_TIMING) and llama.cpp's debug log, whose CUDA-graph lines are counted.
#   2. Loading: the pinned host->GPU copy (the limit), then for the 1B and the 8B Q4_0 the DRAM
#      tier's load (first the tensor phase alone, then to the first token) and llama.cpp's own
#      load of the same file from the page cache.
#   3. bench/gpu_mixed.sh on the 8B, umad's rows with PATCH (UMA_GPU_MIXED_ROWS as there).
#   bench/device/ab.sh [OUT_DIR]     (default build-cuda/ab/out; its summaries are copied to $OUT when
#   set: the device tool brings back a few files only)
# UMA_AB_STAGES: which of "c64 load mixed" to run (default all three); UMA_AB_ROUNDS: c=64 rounds (2);
# UMA_AB_TIMING: the timed runs' UMA_DECODE_TIMING (1: every decode waited for; pipelined: as it runs);
# UMA_AB_TIMED: which variants get a timed run (default "0 1").
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
export UMA_GPU=cuda UMA_ALLOW_SKIP_REMOTE=1 UMA_BUNDLE=${UMA_BUNDLE:-$root/.bundle}
out=${1:-build-cuda/ab/out}
res=${OUT:-$out}
mkdir -p "$out" "$res" build-cuda/models
B=$root/build-cuda/bin
L=$(scripts/llama.sh --print-root)/build/bin
with=$root/build-cuda/ab/with
without=$root/build-cuda/ab/without
[ -d "$without" ] || without=$with
log() { printf '\n== %s\n' "$*" >&2; }
stages=" ${UMA_AB_STAGES:-c64 load mixed} "
stage() { [[ "$stages" == *" $1 "* ]]; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/gpu.txt"
m1=build-cuda/models/1b-q8_0.gguf
m8=build-cuda/models/8b-q4_0.gguf
[ -s "$m1" ] || "$B/uma-mkmodel" --preset 1b --type q8_0 --seed 1 -o "$m1" >/dev/null
# build.sh may have started the 8B in the background (UMA_DEVICE_MAKE_8B=1).
need_8b() {
  for _ in $(seq 600); do [ -s "$m8" ] || [ ! -e "$m8.making" ] && break; sleep 0.5; done
  [ -s "$m8" ] || "$B/uma-mkmodel" --preset 8b --type q4_0 --seed 1 -o "$m8" >/dev/null
}

port=18080 c=64 ctx=32768
health="python3 -c 'import urllib.request,sys; sys.exit(urllib.request.urlopen(\"http://127.0.0.1:$port/health\").status != 200)'"
wait_ready() { for _ in $(seq 1200); do eval "$health" >/dev/null 2>&1 && return 0; sleep 0.1; done; echo "no server" >&2; return 1; }
pid=
trap '[ -n "$pid" ] && kill $pid 2>/dev/null || true' EXIT
stop() { kill -TERM "$pid"; wait "$pid" || true; pid=; }
bench() {  # $1 = file name; bench/gpu.sh's c=64 workload
  "$B/uma-bench" --target "http://127.0.0.1:$port" --json --workload random -c $c -n $((c * 4)) --seed $((100 + c)) \
    --prompt-tokens 128 --output-tokens 128 >"$out/$1.json"
}
metrics() {  # $1 = file name: the counters that say what a run's ticks did (umad only)
  python3 -c 'import re, sys, urllib.request
text = urllib.request.urlopen(sys.argv[1]).read().decode()
print(" ".join(l.split()[0][4:] + "=" + l.split()[1] for l in text.splitlines()
               if re.match(r"uma_(decode_calls|kv_sequence_moves|pipelined_ticks|prefill_skipped_ticks)_total ", l)))' \
    "http://127.0.0.1:$port/metrics" >"$out/$1.metrics" 2>/dev/null || true
}
gpu_mem() {  # $1 = file name: the server's GPU memory (MiB) once its run is done, for the table
  nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits |
    awk -F', ' -v p="$pid" '$1 == p { print $2 }' >"$out/$1.mem" || true
}
umad() {  # $1 = libraries, $2 = log name, $3 = umad flags (words), then env
  local libs=$1 name=$2 flags=$3; shift 3
  # shellcheck disable=SC2086  # flags are words
  env LD_LIBRARY_PATH="$libs" "$@" "$B/umad" --model "$m1" --socket "$out/umad.sock" --n-ctx $ctx --max-sessions $c \
    --http "127.0.0.1:$port" $flags 2>"$out/$name.log" &
  pid=$!
  wait_ready
}

if stage c64; then
# UMA_AB_REFS=0: umad's variants only (an A/B short of device time; no limit or llama-server row).
if [ "${UMA_AB_REFS:-1}" = 1 ]; then
log "c=$c, 1B: llama-batched-bench (the workload's limit)"
LD_LIBRARY_PATH=$without "$L/llama-batched-bench" -m "$m1" -ngl 999 -c $ctx -npp 128 -ntg 128 -npl $c \
  --output-format jsonl 2>/dev/null | grep '^{' >"$out/batched-bench.jsonl" || true
log "c=$c, 1B: llama-server"
LD_LIBRARY_PATH=$without "$L/llama-server" -m "$m1" -ngl 999 -c $ctx -np $c --host 127.0.0.1 --port $port --no-webui \
  >"$out/llama-server.log" 2>&1 &
pid=$!
wait_ready; bench llama-server; gpu_mem llama-server; stop
fi
# umad's variants, "libraries|flags": with PATCH, without it (when build.sh built both), and each
# flag set of UMA_AB_FLAGS on the libraries with it.
variants=("with|")
[ "$without" != "$with" ] && variants+=("without|")
IFS=';' read -ra flag_sets <<<"${UMA_AB_FLAGS:-}"
for f in "${flag_sets[@]}"; do [ -n "$f" ] && variants+=("with|$f"); done
: >"$out/variants.txt"
for k in "${!variants[@]}"; do echo "v$k ${variants[$k]}" >>"$out/variants.txt"; done
for r in $(seq "${UMA_AB_ROUNDS:-2}"); do
  for k in "${!variants[@]}"; do
    libs=${variants[$k]%%|*} flags=${variants[$k]#*|}
    log "c=$c, 1B: umad v$k ($libs, flags: ${flags:-none}), run $r"
    umad "$root/build-cuda/ab/$libs" "umad-v$k-$r" "$flags"; bench "umad-v$k-$r"; gpu_mem "umad-v$k-$r"; metrics "umad-v$k-$r"; stop
  done
done
for k in ${UMA_AB_TIMED:-0 1}; do
  [ "$k" -lt "${#variants[@]}" ] || continue
  libs=${variants[$k]%%|*} flags=${variants[$k]#*|}
  log "c=$c, 1B: umad v$k, every decode timed, llama.cpp's debug log"
  umad "$root/build-cuda/ab/$libs" "timing-v$k" "$flags" UMA_DECODE_TIMING="${UMA_AB_TIMING:-1}" UMA_DEBUG=2; bench "timing-v$k"
  metrics "timing-v$k"; stop
  { grep 'decode timing' "$out/timing-v$k.log" | tail -1
    printf 'graph warm-ups complete %s, resets %s, worst-case reserves %s, slow decodes described %s\n' \
      "$(grep -c 'CUDA graph warmup complete' "$out/timing-v$k.log")" "$(grep -c 'CUDA graph warmup reset' "$out/timing-v$k.log")" \
      "$(grep -c 'reserving a graph for ubatch' "$out/timing-v$k.log")" \
      "$(grep -cE 'slow (decode|tick)' "$out/timing-v$k.log")"; } >"$out/timing-v$k.txt" || true
  # The debug log is large: keep its summary lines and its first slow launches.
  { echo "== v$k"; grep -E 'decode timing|slow (decode|tick)' "$out/timing-v$k.log" | head -120; } >>"$res/timing.txt" || true
  rm -f "$out/timing-v$k.log"
done

python3 - "$out" <<'PY' | tee "$res/c64.txt"
import glob, json, os, statistics, sys
out = sys.argv[1]
def run(n):
    p = os.path.join(out, n + ".json")
    return json.load(open(p))["runs"][0] if os.path.exists(p) else None
print("GPU:", open(os.path.join(out, "gpu.txt")).read().strip())
l = run("llama-server") or run("umad-v0-1")  # without references: ratios over umad's first variant
limit = float("nan")
bb = os.path.join(out, "batched-bench.jsonl")
if os.path.exists(bb) and os.path.getsize(bb) > 0:
    j = json.loads(open(bb).readline())
    # Each request's prompt at S_PP and its output at S_TG, one after the other (bench/gpu.sh).
    limit = 1.0 / (l["prompt_tokens"] / l["output_tokens"] / j["speed_pp"] + 1.0 / j["speed_tg"])
    print(f"llama-batched-bench B={j['pl']}: S_PP {j['speed_pp']:.0f}, S_TG {j['speed_tg']:.0f} t/s; workload limit {limit:.0f} tok/s")
print("| row | tok/s | ITL p50 | p99 | max | p99/p50 | TTFT p50 | p99 | x llama-server | of limit | GPU MiB |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
def mem(n):
    p = os.path.join(out, n + ".mem")
    return open(p).read().strip() or "?" if os.path.exists(p) else "-"

names = ["llama-server"] + sorted(os.path.basename(p)[:-5] for p in glob.glob(os.path.join(out, "umad-v*.json")))
names += [f"timing-v{k}" for k in range(10)]
for n in names:
    r = run(n)
    if r is None: continue
    i, t = r["itl_ms"], r["ttft_ms"]
    print(f"| {n} | {r['output_tok_s']:.0f} | {i['p50']:.2f} | {i['p99']:.2f} | {i['max']:.1f} | {i['p99'] / i['p50']:.2f} | "
          f"{t['p50']:.1f} | {t['p99']:.1f} | {r['output_tok_s'] / l['output_tok_s']:.2f} | {r['output_tok_s'] / limit:.2f} | {mem(n)} |")
print(open(os.path.join(out, "variants.txt")).read().strip())
for n in names:  # what the ticks did: llama_decode calls, stream moves, pipelined ticks
    p = os.path.join(out, n + ".metrics")
    if os.path.exists(p): print(f"{n}: {open(p).read().strip()}")
for k in range(10):
    p = os.path.join(out, f"timing-v{k}.txt")
    if os.path.exists(p): print(f"v{k}:", open(p).read().strip())
PY
fi

if stage load; then
need_8b
log "loading: the pinned copy's limit, the DRAM tier, llama.cpp's own load"
: >"$out/load.jsonl"
for m in "$m1" "$m8"; do
  id=$(basename "$m" .gguf)
  [ -s "$m.idx" ] || "$B/uma-store" add "$m" --id "$id" --redis none >/dev/null
  bytes=$(stat -c %s "$m")
  LD_LIBRARY_PATH=$with "$B/uma-load-bench" --mode h2d --bytes "$bytes" | sed "s/^{/{\"label\":\"h2d:$id\",/" >>"$out/load.jsonl"
  for _ in 1 2 3; do
    LD_LIBRARY_PATH=$with "$B/uma-load-bench" --mode store --tier dram --idx "$m.idx" --dir build-cuda/models \
      | sed "s/^{/{\"label\":\"dram:$id\",/" >>"$out/load.jsonl"
  done
  cat "$m" >/dev/null  # llama.cpp's load from the page cache: its best case
  for _ in 1 2; do
    LD_LIBRARY_PATH=$with "$B/uma-load-bench" --mode llama --model "$m" --load-mode mmap \
      | sed "s/^{/{\"label\":\"llama-mmap-warm:$id\",/" >>"$out/load.jsonl"
  done
done
# The 8B from the NVMe tier, every load from a dropped page cache, against the disk's O_DIRECT rate
# (dd, one 16 MiB request at a time: a floor of what fio would measure) and llama.cpp's mmap load.
cold() { sync; echo 3 >/proc/sys/vm/drop_caches; }
id=$(basename "$m8" .gguf); bytes=$(stat -c %s "$m8")
for _ in 1 2; do
  cold; s=$(date +%s.%N); dd if="$m8" of=/dev/null bs=16M iflag=direct status=none; e=$(date +%s.%N)
  echo "{\"label\":\"dd:$id\",\"gb_s\":$(python3 -c "print($bytes/($e-$s)/1e9)")}" >>"$out/load.jsonl"
  cold; LD_LIBRARY_PATH=$with "$B/uma-load-bench" --mode store --tier nvme --idx "$m8.idx" --dir build-cuda/models --prefault \
    | sed "s/^{/{\"label\":\"nvme:$id\",/" >>"$out/load.jsonl"
  cold; LD_LIBRARY_PATH=$with "$B/uma-load-bench" --mode llama --model "$m8" --load-mode mmap \
    | sed "s/^{/{\"label\":\"llama-mmap-cold:$id\",/" >>"$out/load.jsonl"
done
python3 - "$out/load.jsonl" <<'PY' | tee "$res/load.txt"
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
for mid in sorted({r["label"].split(":")[1] for r in rows}):
    get = lambda k: [r for r in rows if r["label"] == f"{k}:{mid}"]
    h2d = get("h2d")[0]["gb_s"]
    d, l = get("dram"), get("llama-mmap-warm")
    med = lambda v: statistics.median(v) if v else float("nan")
    tgb = med([r["tensor_bytes"] / r["tensor_s"] / 1e9 for r in d if r.get("tensor_s")])
    print(f"{mid}: {d[0]['bytes'] / 1e9:.2f} GB; pinned h2d {h2d:.1f} GB/s; DRAM tier load {med([r['load_s'] for r in d]):.3f} s "
          f"({med([r['gb_s'] for r in d]):.1f} GB/s = {med([r['gb_s'] for r in d]) / h2d:.2f} of h2d), tensor phase {tgb:.1f} GB/s = "
          f"{tgb / h2d:.2f} of h2d, first token {med([r['first_token_s'] for r in d]):.3f} s; llama.cpp mmap from the page cache: "
          f"load {med([r['load_s'] for r in l]):.3f} s, first token {med([r['first_token_s'] for r in l]):.3f} s")
    n, dd, lc = get("nvme"), get("dd"), get("llama-mmap-cold")
    if n and dd:
        disk = med([r["gb_s"] for r in dd])
        goal = 1.15 * n[0]["bytes"] / disk / 1e9 + 0.3
        print(f"{mid} NVMe tier, cold: disk (dd O_DIRECT) {disk:.2f} GB/s; first token {med([r['first_token_s'] for r in n]):.3f} s "
              f"(goal 1.15 x bytes / disk + 0.3 = {goal:.3f} s); llama.cpp mmap cold first token "
              f"{med([r['first_token_s'] for r in lc]):.3f} s")
PY
fi
stage mixed || exit 0
need_8b

log "mixed load, 8B (umad's rows with the patch)"
UMA_GPU_MIXED_UMAD_LIBS=$with UMA_BENCH_MODEL=$m8 bench/gpu_mixed.sh "$out/mixed" 2>"$out/mixed.err" | tee "$res/mixed.txt"

# What the slow ticks of the mixed load are: umad's row once more, every decode timed.
log "mixed load, 8B, umad with every decode timed"
umad_8b_log=$out/mixed-timing.log
LD_LIBRARY_PATH=$with UMA_DECODE_TIMING="${UMA_AB_TIMING:-1}" "$B/umad" --model "$m8" --socket "$out/umad.sock" --http "127.0.0.1:$port" \
  --n-ctx 36864 --max-sessions 9 --threads 8 2>"$umad_8b_log" &
pid=$!
wait_ready
"$B/uma-bench" --target "http://127.0.0.1:$port" --keep-alive --json --workload mixed -c 8 -d 12 --seed 8 \
  --prompt-tokens 32 --output-tokens 128 --ignore-eos --background-prompt-tokens 3300 --background-output-tokens 8 \
  --background-every-s 1000 --background-start-s 1 >"$out/mixed-timing.json"
stop
grep -E 'decode timing|slow (decode|tick)' "$umad_8b_log" | head -80 >"$res/mixed-timing.txt" || true
rm -f "$umad_8b_log"
