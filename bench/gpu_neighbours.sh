#!/usr/bin/env bash
# Host contention on the GPU machine: umad and llama-server on the same model (1B-shape Q8_0),
# GPU and workload (uma-bench: c streams, 128-word prompts, 128 tokens out, 4c requests), quiet and
# with busy loops on half of the host's cores, alternating within each round; prints tok/s and ITL
# per run and each server's busy/quiet ratio.
#   bench/gpu_neighbours.sh [ROUNDS]            (default 2)
# Env: UMA_NEIGHBOURS_CONC ("16 64"), UMA_BENCH_PORT (18080), UMA_BENCH_MODEL, UMA_BUNDLE (offline setup).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
rounds=${1:-2}
read -r -a conc <<<"${UMA_NEIGHBOURS_CONC:-16 64}"
export UMA_GPU=${UMA_GPU:-cuda} UMA_BUILD=build-${UMA_GPU:-cuda} UMA_BENCH_PRESET=1b
source bench/lib.sh
bdir=$ubuild
out=${OUT:-$bdir}/gpu-neighbours
mkdir -p "$out"
bench_setup llama-server
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null || echo unknown)
busy=$(( $(nproc) / 2 ))
health="python3 -c 'import urllib.request,sys; sys.exit(urllib.request.urlopen(\"http://127.0.0.1:$port/health\").status != 200)'"
loops=()
neighbours_on() { for _ in $(seq "$busy"); do yes >/dev/null & loops+=($!); done; }
neighbours_off() { [ ${#loops[@]} = 0 ] || kill "${loops[@]}" 2>/dev/null || true; wait "${loops[@]}" 2>/dev/null || true; loops=(); }
pid=
trap 'neighbours_off; [ -z "$pid" ] || kill $pid 2>/dev/null || true' EXIT
bench() {  # name, c
  "$bdir/bin/uma-bench" --target "http://127.0.0.1:$port" --json --workload random -c "$2" -n $(($2 * 4)) --seed $((200 + $2)) \
    --prompt-tokens 128 --output-tokens 128 >"$out/$1.json" 2>/dev/null
}
for c in "${conc[@]}"; do
  for server in umad llama-server; do
    if [ "$server" = umad ]; then
      "$bdir/bin/umad" --model "$model" --socket "$out/umad.sock" --http "127.0.0.1:$port" --n-ctx $((c * 512)) \
        --max-sessions "$c" 2>"$out/umad-c$c.log" &
    else
      "$L/llama-server" -m "$model" -ngl 999 -c $((c * 512)) -np "$c" --host 127.0.0.1 --port "$port" --no-webui \
        >"$out/llama-server-c$c.log" 2>&1 &
    fi
    pid=$!
    wait_ready "$health"
    bench "$server-warm-c$c" "$c"
    for r in $(seq "$rounds"); do
      # Alternate which goes first.
      if [ $((r % 2)) = 1 ]; then bench "$server-quiet-c$c-$r" "$c"; neighbours_on; bench "$server-busy-c$c-$r" "$c"; neighbours_off
      else neighbours_on; bench "$server-busy-c$c-$r" "$c"; neighbours_off; bench "$server-quiet-c$c-$r" "$c"; fi
    done
    if [ "$server" = umad ]; then "$bdir/bin/uma-cli" -s "$out/umad.sock" metrics >"$out/umad-c$c.metrics.json" 2>/dev/null || true; fi
    kill -TERM "$pid"; wait "$pid" || true; pid=
  done
done
trap - EXIT
python3 - "$out" "$rounds" "$gpu" "$busy" "${conc[@]}" <<'EOF'
import json, os, sys
out, rounds, gpu, busy, conc = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5:]
print(f"GPU: {gpu}; neighbours: {busy} busy loops on {os.cpu_count()} host cores")
print("| c | server | quiet tok/s | busy tok/s | busy / quiet | ITL p99 quiet / busy ms |")
print("|---|---|---|---|---|---|")
for c in conc:
    for s in ("umad", "llama-server"):
        q = [json.load(open(os.path.join(out, f"{s}-quiet-c{c}-{r}.json")))["runs"][0] for r in range(1, rounds + 1)]
        b = [json.load(open(os.path.join(out, f"{s}-busy-c{c}-{r}.json")))["runs"][0] for r in range(1, rounds + 1)]
        qt = [x["output_tok_s"] for x in q]; bt = [x["output_tok_s"] for x in b]
        fmt = lambda xs, f: " / ".join(f % v for v in xs)
        itl = fmt([x["itl_ms"]["p99"] for x in q], "%.1f") + " ; " + fmt([x["itl_ms"]["p99"] for x in b], "%.1f")
        print("| %s | %s | %s | %s | %.3f | %s |" % (c, s, fmt(qt, "%.0f"), fmt(bt, "%.0f"), sum(bt) / sum(qt), itl))
EOF
