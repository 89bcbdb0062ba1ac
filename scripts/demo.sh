#!/usr/bin/env bash
# README command 1: set up, build, and run the main job: start umad on a demo model and stream a
# completion through uma-cli. The demo model is the `small` preset at Q8_0 made by uma-mkmodel:
# random weights of a realistic shape (no network needed), so the text is gibberish by design;
# point UMA_MODEL at any llama-family GGUF to see real text.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
prompt=${1:-"Once upon a time, in a land far away,"}

# UMA_GPU=cuda: llama.cpp with CUDA and the project against it, in build-cuda/ (all layers on the GPU).
bdir=build${UMA_GPU:+-$UMA_GPU}
scripts/setup.sh
cmake -S . -B "$bdir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$bdir" -j "${UMA_JOBS:-$(nproc)}" --target umad uma-cli uma-mkmodel

model=${UMA_MODEL:-build/models/small-q8_0.gguf}
if [ ! -s "$model" ]; then
  echo "== making the demo model ($model: small preset, Q8_0, seed 1)"
  mkdir -p "$(dirname "$model")"
  "$bdir"/bin/uma-mkmodel --preset small --type q8_0 --seed 1 -o "$model" >/dev/null
fi

sock=$(mktemp -u /tmp/uma-demo-XXXXXX.sock)
log=$(mktemp /tmp/uma-demo-XXXXXX.log)
echo "== starting umad on $model (socket $sock, log $log)"
"$bdir"/bin/umad --model "$model" --socket "$sock" --max-tokens "${UMA_DEMO_TOKENS:-64}" 2>"$log" &
pid=$!
trap 'kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null; rm -f "$log"' EXIT
for _ in $(seq 600); do
  "$bdir"/bin/uma-cli -s "$sock" metrics >/dev/null 2>&1 && break
  kill -0 $pid 2>/dev/null || { cat "$log"; exit 1; }
  sleep 0.1
done
grep -m1 'model:' "$log" || true
echo "== prompt: $prompt"
echo "== streamed completion:"
"$bdir"/bin/uma-cli -s "$sock" "$prompt"
echo "== metrics:"
"$bdir"/bin/uma-cli -s "$sock" metrics
kill -TERM $pid
wait $pid && echo "== umad stopped cleanly (exit 0)"
trap - EXIT
rm -f "$log"
