#!/usr/bin/env bash
# umad and llama-server on a machine doing other work: the same model, workload and thread flags,
# quiet and beside three neighbours, as ratios to each server's quiet row in the same run.
#   bench/neighbours.sh [OUT_DIR]      (default build/bench-results/neighbours)
# Neighbours: busy1 (`yes` on one core), onoff (`yes` on for 2 s, off for 2 s), compile
# (llama.cpp's ggml-cpu library built with -j1 from the pinned source, from scratch, again and
# again). Each server's quiet rows run first and last (quiet, quiet2); ratios are to the faster.
# Servers (UMA_NEIGHBOURS_SERVERS): umad-auto (--threads auto), umad-N and llama-N (--threads N / -t N).
# Workload: 64-token prompts, 64 tokens out (ignore_eos), closed loop of 1 and of 4 streams, each
# for UMA_NEIGHBOURS_SECONDS (16).
# Env as bench/lib.sh (UMA_BENCH_MODEL, UMA_BENCH_PORT, UMA_BUILD).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
source bench/lib.sh
out=${1:-$ubuild/bench-results/neighbours}
seconds=${UMA_NEIGHBOURS_SECONDS:-16}
servers=${UMA_NEIGHBOURS_SERVERS:-"umad-auto umad-2 llama-2 llama-1"}
loads=${UMA_NEIGHBOURS_LOADS:-"quiet busy1 onoff compile quiet2"}
ctx=4096
mkdir -p "$out"
bench_setup llama-server

# The compile neighbour: llama.cpp's CPU backend configured once in a scratch folder (no ccache),
# rebuilt from scratch over and over for as long as the row runs.
src=$(scripts/llama.sh --print-root)/src
compile_dir="$out/compile"
if [ ! -f "$compile_dir/build.ninja" ] || ! grep -q 'GGML_CCACHE:BOOL=OFF' "$compile_dir/CMakeCache.txt"; then
  rm -rf "$compile_dir"
  cmake -S "$src" -B "$compile_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DGGML_CCACHE=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_CURL=OFF >/dev/null
fi

# Each neighbour runs in a process group of its own, stopped whole (a compiler a build started too).
neighbour=
start_neighbour() {
  local script
  case "$1" in
    quiet|quiet2) return ;;
    busy1) script='exec yes >/dev/null' ;;
    onoff) script='while :; do yes >/dev/null & y=$!; sleep 2; kill $y; wait $y; sleep 2; done' ;;
    compile) script="while :; do ninja -C '$compile_dir' -t clean >/dev/null; ninja -C '$compile_dir' -j1 ggml-cpu >/dev/null 2>&1; done" ;;
    *) echo "unknown neighbour $1" >&2; exit 2 ;;
  esac
  setsid bash -c "$script" &
  neighbour=$!
}
stop_neighbour() {
  [ -n "$neighbour" ] || return 0
  kill -- "-$neighbour" 2>/dev/null || true
  wait "$neighbour" 2>/dev/null || true
  neighbour=
}
trap 'stop_neighbour; kill ${pid:-} 2>/dev/null || true' EXIT

start_server() {  # $1 = server name; sets pid and target
  local name=$1 n=${1##*-}
  case "$name" in
    umad-*)
      sock="$out/umad.sock"
      "$ubuild"/bin/umad --model "$model" --socket "$sock" --threads "$n" --n-ctx "$ctx" --max-sessions 4 \
        --max-tokens 512 --http "127.0.0.1:$((port + 1))" 2>"$out/$name.log" &
      pid=$!
      wait_ready "$ubuild/bin/uma-cli -s $sock metrics"
      target="uds:$sock" ;;
    llama-*)
      "$L/llama-server" -m "$model" -t "$n" -c "$ctx" -np 4 -kvu --host 127.0.0.1 --port "$port" --no-webui \
        >"$out/$name.log" 2>&1 &
      pid=$!
      wait_ready "python3 -c 'import urllib.request,sys; sys.exit(urllib.request.urlopen(\"http://127.0.0.1:$port/health\").status != 200)'"
      target="http://127.0.0.1:$port" ;;
  esac
}

for server in $servers; do
  start_server "$server"
  # Warm: the first requests page the weights in and build the graphs.
  "$ubuild"/bin/uma-bench --target "$target" --workload random -c 4 -n 8 --prompt-tokens 64 --output-tokens 16 >/dev/null
  for load in $loads; do
    start_neighbour "$load"
    for c in 1 4; do
      log "$server, $load, $c streams"
      "$ubuild"/bin/uma-bench --target "$target" --json --workload random -c "$c" -d "$seconds" --seed "$((300 + c))" \
        --prompt-tokens 64 --output-tokens 64 --ignore-eos >"$out/$server-$load-c$c.json"
      if [ "${server%%-*}" = umad ]; then
        "$ubuild"/bin/uma-cli -s "$sock" metrics >"$out/$server-$load-c$c.metrics.json" 2>/dev/null || true
        python3 -c "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:$((port + 1))/metrics').read().decode())" \
          >"$out/$server-$load-c$c.prom" 2>/dev/null || true
      fi
    done
    stop_neighbour
  done
  kill -TERM "$pid"; wait "$pid" || true; pid=
done
trap - EXIT

python3 - "$out" "$servers" "$loads" <<'EOF' | tee "$out/report.md"
import json, os, sys
out, servers, loads = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
def load(name):
    p = os.path.join(out, name)
    if not os.path.exists(p):
        return None
    j = json.load(open(p))
    return j["runs"][0] if "runs" in j else j
def slow_ticks(name):  # decodes over 300 ms so far (the histogram's bucket bound nearest 250 ms)
    p = os.path.join(out, name)
    if not os.path.exists(p):
        return None
    count = over = 0.0
    for line in open(p):
        if line.startswith("uma_decode_duration_seconds_count"):
            count = float(line.split()[-1])
        if line.startswith('uma_decode_duration_seconds_bucket{le="0.3"}'):
            over = float(line.split()[-1])
    return count - over
print("| neighbour | streams | server | tok/s | x quiet | TTFT p50 ms | ITL p50 ms | ITL p99 ms | ITL max ms | threads (changes) | ticks > 300 ms |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for c in (1, 4):
    for l in loads:
        for s in servers:
            r = load(f"{s}-{l}-c{c}.json")
            if not r:
                continue
            quiet = [q["output_tok_s"] for q in (load(f"{s}-quiet-c{c}.json"), load(f"{s}-quiet2-c{c}.json")) if q]
            tps = r["output_tok_s"]
            ratio = tps / max(quiet) if quiet else float("nan")
            m = load(f"{s}-{l}-c{c}.metrics.json")
            thr = f'{m.get("compute_threads")} ({m.get("compute_thread_changes_total")})' if m else ""
            # The row's own slow ticks: this row's count less the row before it on the same server.
            rows = [(ll, cc) for ll in loads for cc in (1, 4)]
            k = rows.index((l, c))
            now, before = slow_ticks(f"{s}-{l}-c{c}.prom"), (slow_ticks("%s-%s-c%d.prom" % (s, *rows[k - 1])) if k else 0.0)
            slow = "" if now is None else "%d" % (now - (before or 0.0))
            print(f'| {l} | {c} | {s} | {tps:.1f} | {ratio:.2f} | {r["ttft_ms"]["p50"]:.0f} | {r["itl_ms"]["p50"]:.1f} | '
                  f'{r["itl_ms"]["p99"]:.1f} | {r["itl_ms"]["max"]:.1f} | {thr} | {slow} |')
EOF
