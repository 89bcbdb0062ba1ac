#!/usr/bin/env bash
# Same-run before/after on this machine's CPU: umad built at REV (a git worktree under build/) and
# umad of the working tree, same model, threads and workload, alternating, ROUNDS rounds.
#   bench/ab.sh REV [ROUNDS]        (default 2)
# Env: UMA_BENCH_MODEL (small preset, Q8_0), UMA_BENCH_THREADS (2), UMA_AB_CONC (8), UMA_AB_N (48),
#      UMA_AB_FLAGS (extra umad flags for both), UMA_AB_NEW_THREADS (the new build's --threads, e.g.
#      auto; default the same as the old's), UMA_AB_TARGET (uds, or http: the OpenAI front end,
#      port UMA_BENCH_PORT, 18090). Prints one line per run and the new/old ratio.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
rev=${1:?usage: bench/ab.sh REV [ROUNDS]}
rounds=${2:-2}
threads=${UMA_BENCH_THREADS:-2}
new_threads=${UMA_AB_NEW_THREADS:-$threads}
conc=${UMA_AB_CONC:-8}
n=${UMA_AB_N:-48}
read -r -a flags <<<"${UMA_AB_FLAGS:-}"
port=${UMA_BENCH_PORT:-18090}
case ${UMA_AB_TARGET:-uds} in
  uds) target_flags=() ;;
  http) target_flags=(--http "127.0.0.1:$port") ;;
  *) echo "UMA_AB_TARGET: uds or http" >&2; exit 2 ;;
esac
out=build/ab
mkdir -p "$out"

scripts/setup.sh >/dev/null
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "$(nproc)" --target umad uma-bench uma-mkmodel uma-cli >/dev/null
old=build/ab-src
rm -rf "$old"
git worktree prune
git worktree add --detach -f "$old" "$rev" >/dev/null
trap 'git worktree remove --force "$old" 2>/dev/null || true' EXIT
llama_root=$(grep '^LLAMA_CPP_ROOT' build/CMakeCache.txt | cut -d= -f2)
cmake -S "$old" -B "$old/build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DUMA_BUILD_TESTS=OFF \
  -DLLAMA_CPP_ROOT="$llama_root" >/dev/null
cmake --build "$old/build" -j "$(nproc)" --target umad >/dev/null
model=${UMA_BENCH_MODEL:-build/models/small-q8_0.gguf}
[ -s "$model" ] || build/bin/uma-mkmodel --preset small --type q8_0 --seed 1 -o "$model" >/dev/null

sock=$out/umad.sock
run() {  # name, umad binary, threads
  local name=$1 bin=$2 t=$3 pid
  rm -f "$sock"
  "$bin" --model "$model" --socket "$sock" --n-ctx 16384 --max-sessions "$conc" --threads "$t" \
    ${flags[@]+"${flags[@]}"} ${target_flags[@]+"${target_flags[@]}"} 2>"$out/$name.log" &
  pid=$!
  for _ in $(seq 600); do UMA_SOCK=$sock build/bin/uma-cli metrics >/dev/null 2>&1 && break; sleep 0.1; done
  local target="uds:$sock"
  [ "${UMA_AB_TARGET:-uds}" = http ] && target="http://127.0.0.1:$port"
  build/bin/uma-bench --target "$target" --json --workload random -c "$conc" -n "$n" --seed 108 \
    --prompt-tokens 128 --output-tokens 64 >"$out/$name.json" 2>/dev/null
  kill -TERM "$pid"; wait "$pid" || true
}
for r in $(seq "$rounds"); do
  # Alternate which side goes first: on a shared machine the first run of a pair often differs.
  if [ $((r % 2)) = 1 ]; then run "old$r" "$old/build/bin/umad" "$threads"; run "new$r" build/bin/umad "$new_threads"
  else run "new$r" build/bin/umad "$new_threads"; run "old$r" "$old/build/bin/umad" "$threads"; fi
done
python3 bench/ab_report.py "$out" "$rounds" "$rev"
