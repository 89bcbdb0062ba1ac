#!/usr/bin/env bash
# Same-run before/after on the GPU: umad built from OLD_SRC (a source tree, e.g. `git archive REV`
# unpacked) and umad of this tree, same model (1B-shape Q8_0), GPU and workload (uma-bench of
# this tree: c streams, 128-word prompts, 128 tokens out, 4c requests), alternating, ROUNDS rounds
# each over the Unix socket and over HTTP. Prints one line per run and the new/old ratios.
#   bench/gpu_ab.sh OLD_SRC [ROUNDS]            (default 2)
# Env: UMA_AB_CONC (64), UMA_BENCH_PORT (18080), UMA_BENCH_MODEL (1B Q8_0), UMA_BUNDLE (offline setup).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
old_src=$(cd "${1:?usage: bench/gpu_ab.sh OLD_SRC [ROUNDS]}" && pwd)
rounds=${2:-2}
conc=${UMA_AB_CONC:-64}
port=${UMA_BENCH_PORT:-18080}
export UMA_GPU=${UMA_GPU:-cuda}
bdir=build-$UMA_GPU
out=$bdir/gpu-ab
mkdir -p "$out"
scripts/setup.sh >/dev/null
cmake -S . -B "$bdir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DUMA_BUILD_TESTS=OFF >/dev/null
cmake --build "$bdir" -j "$(nproc)" --target umad uma-bench uma-mkmodel uma-cli >/dev/null
llama_root=$(grep '^LLAMA_CPP_ROOT' "$bdir/CMakeCache.txt" | cut -d= -f2)
cmake -S "$old_src" -B "$old_src/$bdir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DUMA_BUILD_TESTS=OFF \
  -DLLAMA_CPP_ROOT="$llama_root" >/dev/null
cmake --build "$old_src/$bdir" -j "$(nproc)" --target umad >/dev/null
model=${UMA_BENCH_MODEL:-$bdir/models/1b-q8_0.gguf}
if [ ! -s "$model" ]; then
  mkdir -p "$(dirname "$model")"
  "$bdir/bin/uma-mkmodel" --preset 1b --type q8_0 --seed 1 -o "$model" >/dev/null
fi
nvidia-smi --query-gpu=name --format=csv,noheader >"$out/gpu.txt" 2>/dev/null || echo unknown >"$out/gpu.txt"
sock=$out/umad.sock
run() {  # name, umad binary, target kind (uds | http)
  local name=$1 bin=$2 kind=$3 pid target
  rm -f "$sock"
  "$bin" --model "$model" --socket "$sock" --http "127.0.0.1:$port" --n-ctx $((conc * 512)) --max-sessions "$conc" \
    2>"$out/$name.log" &
  pid=$!
  for _ in $(seq 1200); do "$bdir/bin/uma-cli" -s "$sock" metrics >/dev/null 2>&1 && break; sleep 0.1; done
  target="uds:$sock"; [ "$kind" = http ] && target="http://127.0.0.1:$port"
  "$bdir/bin/uma-bench" --target "$target" --json --workload random -c "$conc" -n $((conc * 4)) --seed 164 \
    --prompt-tokens 128 --output-tokens 128 >"$out/$name.json" 2>/dev/null
  kill -TERM "$pid"; wait "$pid" || true
}
for kind in uds http; do
  for r in $(seq "$rounds"); do
    # Alternate which side goes first.
    if [ $((r % 2)) = 1 ]; then run "old-$kind-$r" "$old_src/$bdir/bin/umad" "$kind"; run "new-$kind-$r" "$bdir/bin/umad" "$kind"
    else run "new-$kind-$r" "$bdir/bin/umad" "$kind"; run "old-$kind-$r" "$old_src/$bdir/bin/umad" "$kind"; fi
  done
done
echo "GPU: $(cat "$out/gpu.txt") | c=$conc"
python3 bench/ab_report.py "$out" "$rounds" "$(basename "$old_src")" uds http
