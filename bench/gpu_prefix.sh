#!/usr/bin/env bash
# The 8B rows on a GPU, one command (bench/gpu.sh calls it; it also runs alone):
#   bench/gpu_prefix.sh [OUT_DIR]      (default build-cuda/bench-gpu-prefix)
# On an 8B-shape Q4_0 model (Llama 3 8B's layers), llama-server (-c 65536 -np 8) against umad
# (--n-ctx 65536 --max-sessions 8), same model file, GPU and uma-bench workloads:
# - shared prefix: 8 clients, one 3000-token prefix + 40 unique tokens, 16 out (TTFT, ITL max);
# - the same one request at a time (a lone stream never waits);
# - cold long prompts: 8 clients, distinct 3000-token prompts, 64 out (TTFT p95/p99, ITL p50/max);
# - the room per request each server gives (umad's start line; llama-server's -c / -np).
# Expects the CUDA build of bench/gpu.sh (UMA_GPU=cuda, UMA_BUNDLE for an offline setup).
# Env: UMA_BENCH_PORT (18080), UMA_GPU_PREFIX_DEBUG=1 (umad logs every tick: where a stall goes).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
export UMA_GPU=${UMA_GPU:-cuda}
bdir=build-$UMA_GPU
out=${1:-$bdir/bench-gpu-prefix}
port=${UMA_BENCH_PORT:-18080}
ctx=65536
np=8
mkdir -p "$out"
log() { printf '\n== %s\n' "$*" >&2; }
scripts/setup.sh llama-server >/dev/null
cmake -S . -B "$bdir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DUMA_BUILD_TESTS=OFF >/dev/null
cmake --build "$bdir" -j "$(nproc)" --target umad uma-bench uma-mkmodel >/dev/null
L=$(scripts/llama.sh --print-root)/build/bin
m8=$bdir/models/8b-q4_0.gguf
[ -s "$m8" ] || { mkdir -p "$(dirname "$m8")"; "$bdir/bin/uma-mkmodel" --preset 8b --type q4_0 --seed 1 -o "$m8" >/dev/null; }
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader >"$out/gpu.txt" 2>/dev/null || echo unknown >"$out/gpu.txt"

wait_ready() {
  for _ in $(seq 1800); do
    python3 -c "import urllib.request,sys; sys.exit(urllib.request.urlopen('http://127.0.0.1:$port/health').status != 200)" \
      >/dev/null 2>&1 && return 0
    kill -0 "$pid" 2>/dev/null || { echo "server exited" >&2; return 1; }
    sleep 0.1
  done
  echo "server did not come up" >&2; return 1
}
run() {  # $1 = name, $2 = target, then uma-bench flags
  local name=$1 target=$2; shift 2
  "$bdir/bin/uma-bench" --target "$target" --json "$@" >"$out/$name.json"
}
rows() {  # $1 = server name, $2 = target
  run "$1-shared" "$2" --workload shared-prefix -c 8 -n 32 --seed 11 --prefix-tokens 3000 --suffix-tokens 40 \
    --output-tokens 16 --ignore-eos
  run "$1-shared-c1" "$2" --workload shared-prefix -c 1 -n 8 --seed 12 --prefix-tokens 3000 --suffix-tokens 40 \
    --output-tokens 16 --ignore-eos
  run "$1-cold" "$2" --workload random -c 8 -n 16 --seed 13 --prompt-tokens 3000 --output-tokens 64 --ignore-eos
}

log "llama-server -c $ctx -np $np"
"$L/llama-server" -m "$m8" -ngl 999 -c "$ctx" -np "$np" --host 127.0.0.1 --port "$port" --no-webui \
  >"$out/llama-server.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
wait_ready
rows llama-server "http://127.0.0.1:$port"
kill -TERM $pid; wait $pid || true

log "umad --n-ctx $ctx --max-sessions $np"
debug=(); [ "${UMA_GPU_PREFIX_DEBUG:-0}" = 1 ] && debug=(env UMA_DEBUG=1)
"${debug[@]}" "$bdir/bin/umad" --model "$m8" --socket "$out/umad.sock" --n-ctx "$ctx" --max-sessions "$np" \
  --http "127.0.0.1:$port" 2>"$out/umad.log" &
pid=$!
wait_ready
rows umad-uds "uds:$out/umad.sock"
UMA_SOCK="$out/umad.sock" "$bdir/bin/uma-cli" metrics >"$out/umad-metrics.json" 2>/dev/null || true
kill -TERM $pid; wait $pid || true
trap - EXIT

python3 - "$out" "$ctx" "$np" <<'PY'
import json, re, sys
out, ctx, np_ = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def r(name):
    return json.load(open(f"{out}/{name}.json"))["runs"][0]
print("GPU:", open(f"{out}/gpu.txt").read().strip(), "| 8B-shape Q4_0")
rows = [("shared", "8 clients, shared 3000-token prefix + 40, 16 out"),
        ("shared-c1", "1 client, same prefix workload"),
        ("cold", "8 clients, distinct 3000-token prompts, 64 out")]
print("| workload | server | tok/s | TTFT p50 / p95 / p99 ms | ITL p50 / p99 / max ms |")
print("|---|---|---|---|---|")
for key, what in rows:
    for server in ("llama-server", "umad-uds"):
        x = r(f"{server}-{key}")
        t, i = x["ttft_ms"], x["itl_ms"]
        print(f"| {what} | {server} | {x['output_tok_s']:.0f} | {t['p50']:.0f} / {t['p95']:.0f} / {t['p99']:.0f} | "
              f"{i['p50']:.1f} / {i['p99']:.1f} / {i['max']:.1f} |")
for key, _ in rows:
    u, l = r(f"umad-uds-{key}"), r(f"llama-server-{key}")
    print(f"{key}: TTFT p50 {u['ttft_ms']['p50'] / l['ttft_ms']['p50']:.2f}x, p95 "
          f"{u['ttft_ms']['p95'] / l['ttft_ms']['p95']:.2f}x, p99 {u['ttft_ms']['p99'] / l['ttft_ms']['p99']:.2f}x; "
          f"ITL max {u['itl_ms']['max']:.0f} ms = {u['itl_ms']['max'] / r('umad-uds-shared')['itl_ms']['p50']:.1f}x "
          f"the shared run's ITL p50")
m = re.search(r"room per request (\d+) cells", open(f"{out}/umad.log").read())
print(f"room per request: umad {m.group(1) if m else '?'} cells, llama-server {ctx // np_} (-c {ctx} -np {np_}); "
      f"n_ctx / max-sessions = {ctx // np_}")
PY
