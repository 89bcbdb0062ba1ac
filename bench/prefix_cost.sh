#!/usr/bin/env bash
# Does the prefix cache cost anything when nothing is shared?
#   bench/prefix_cost.sh [ROUNDS]     (default 3)
# The oracle model, 8 concurrent clients over the Unix socket, random 30-word prompts (nothing
# shared), 32 tokens out, rounds of 1000 requests; umad with the prefix cache on, then off: tok/s,
# ITL p99 and RSS growth per round. Env: UMA_BENCH_THREADS (2); UMA_GPU=cuda runs it on the GPU build.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
rounds=${1:-3}
threads=${UMA_BENCH_THREADS:-2}
bdir=build${UMA_GPU:+-$UMA_GPU}
scripts/setup.sh >/dev/null
cmake -S . -B "$bdir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$bdir" -j "$(nproc)" --target umad uma-bench uma-cli uma-mkmodel >/dev/null
b=$bdir/bin
m=$bdir/models/oracle.gguf
[ -s "$m" ] || { mkdir -p "$bdir/models"; "$b/uma-mkmodel" --preset oracle --type f32 --seed 1 -o "$m" >/dev/null; }
sock=$(mktemp -u /tmp/uma-prefix-cost-XXXXXX.sock)
for flags in "" "--no-prefix-cache"; do
  "$b/umad" --model "$m" --socket "$sock" --threads "$threads" --n-ctx 4096 $flags 2>/dev/null &
  pid=$!
  trap 'kill $pid 2>/dev/null || true' EXIT
  for _ in $(seq 300); do "$b/uma-cli" -s "$sock" metrics >/dev/null 2>&1 && break; sleep 0.1; done
  rss0=$(awk '/VmRSS/{print $2}' /proc/$pid/status)
  for round in $(seq "$rounds"); do
    "$b/uma-bench" --target "uds:$sock" --json --workload random -c 8 -n 1000 --seed $((round * 7)) \
      --prompt-tokens 30 --output-tokens 32 2>/dev/null >"$sock.json"
    rss=$(awk '/VmRSS/{print $2}' /proc/$pid/status)
    python3 -c "import json; r=json.load(open('$sock.json'))['runs'][0]; print('cache ${flags:+off}${flags:-on}, round $round: %.0f tok/s, ITL p99 %.1f ms, RSS +%.1f MB' % (r['output_tok_s'], r['itl_ms']['p99'], ($rss - $rss0) / 1024))"
  done
  kill -TERM $pid; wait $pid || true
  trap - EXIT
done
rm -f "$sock.json"
