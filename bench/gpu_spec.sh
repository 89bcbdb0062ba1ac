#!/usr/bin/env bash
# Speculative decoding on a GPU, one command:
#   bench/gpu_spec.sh [OUT_DIR]      (default build-cuda/bench-gpu-spec)
# The target is the 8b preset built as the oracle (greedy next = last + 1 at Llama 3 8B's real
# cost), Q4_0; the draft the tiny preset as the oracle agreeing on UMA_SPEC_AGREE (0.8) of the
# tokens. umad without speculation (--speculative off: the default GPU path, device sampling,
# pipelined ticks), with prompt lookup and with the draft model (both verified on the device);
# llama-server without, with --spec-type ngram-simple, and with -md (draft-simple, draft on the
# GPU too); same model files and GPU, bench/spec_client.py's workloads at c=1, c=16 and c=64 (c=64:
# speculation must back off when the batch is large; room per stream n_ctx / 64 = 1024 on both).
# Expects the CUDA build of bench/gpu.sh (UMA_GPU=cuda, UMA_BUNDLE for an offline setup).
# Env: UMA_SPEC_AGREE (0.8), UMA_SPEC_TOKENS (256), UMA_SPEC_REQUESTS (3), UMA_BENCH_PORT (18080).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
export UMA_GPU=${UMA_GPU:-cuda}
bdir=build-$UMA_GPU
out=${1:-$bdir/bench-gpu-spec}
port=${UMA_BENCH_PORT:-18080}
url=http://127.0.0.1:$port
ctx=65536
mkdir -p "$out"
log() { printf '\n== %s\n' "$*" >&2; }
scripts/setup.sh llama-server >/dev/null
cmake -S . -B "$bdir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$bdir" -j "$(nproc)" --target umad uma-mkmodel uma-cli >/dev/null
L=$(scripts/llama.sh --print-root)/build/bin
agree=${UMA_SPEC_AGREE:-0.8}
target=$bdir/models/8b-oracle-q4_0.gguf
draft=$bdir/models/tiny-oracle-agree$agree-q8_0.gguf
mkdir -p "$bdir/models"
[ -s "$target" ] || "$bdir/bin/uma-mkmodel" --preset 8b --oracle --type q4_0 --seed 1 -o "$target" >/dev/null
[ -s "$draft" ] || "$bdir/bin/uma-mkmodel" --preset tiny --oracle --agree "$agree" --type q8_0 --seed 2 -o "$draft" >/dev/null
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader >"$out/gpu.txt" 2>/dev/null || echo unknown >"$out/gpu.txt"
tokens=${UMA_SPEC_TOKENS:-256}
reqs=${UMA_SPEC_REQUESTS:-3}

pid=
. bench/spec_rows.sh
trap spec_server_stop EXIT
lookup_rows=("copy 1 $reqs $tokens" "fresh 1 $reqs $tokens" "copy 16 1 128" "fresh 16 1 128" "copy 64 1 128" "fresh 64 1 128")
draft_rows=("fresh 1 $reqs $tokens" "fresh 16 1 128" "fresh 64 1 128")

: >"$out/rows.txt"
for mode in off lookup draft; do
  flags=(--speculative "$mode")
  [ "$mode" = draft ] && flags=(--speculative lookup --draft-model "$draft")
  log "umad ${flags[*]}"
  "$bdir/bin/umad" --model "$target" --socket "$out/umad.sock" --n-ctx "$ctx" --max-sessions 64 --http "127.0.0.1:$port" \
    "${flags[@]}" 2>"$out/umad-$mode.log" &
  pid=$!
  spec_server_ready
  if [ "$mode" = draft ]; then spec_rows "umad-$mode" "${draft_rows[@]}"; else spec_rows "umad-$mode" "${lookup_rows[@]}"; fi
  "$bdir/bin/uma-cli" -s "$out/umad.sock" metrics >"$out/umad-$mode.metrics.json" 2>/dev/null || true
  spec_server_stop
done
for spec in none ngram-simple draft-simple; do
  extra=()
  [ "$spec" = draft-simple ] && extra=(-md "$draft" -ngld 999)
  log "llama-server --spec-type $spec ${extra[*]}"
  "$L/llama-server" -m "$target" -ngl 999 -c "$ctx" -np 64 --host 127.0.0.1 --port "$port" --no-webui \
    --spec-type "$spec" "${extra[@]}" >"$out/llama-server-$spec.log" 2>&1 &
  pid=$!
  spec_server_ready
  if [ "$spec" = draft-simple ]; then spec_rows "llama-server-$spec" "${draft_rows[@]}"; else spec_rows "llama-server-$spec" "${lookup_rows[@]}"; fi
  spec_server_stop
done
echo "GPU: $(cat "$out/gpu.txt")"
python3 bench/spec_table.py "$out/rows.txt"
