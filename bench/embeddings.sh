#!/usr/bin/env bash
# Embeddings: umad's /v1/embeddings against llama-server --embeddings (same model file, threads,
# pooling mean, same batches), and a decode stream's inter-token gaps alone and beside an
# embeddings burst (umad: the burst runs between its ticks, at most 512 tokens a pass).
#   bench/embeddings.sh [OUT_DIR]      (default build/bench-results/embeddings)
# Env: as bench/lib.sh; UMA_EMB_REQUESTS (16), UMA_EMB_INPUTS (16 per request), UMA_EMB_WORDS (48).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
source bench/lib.sh
out=${1:-build/bench-results/embeddings}
mkdir -p "$out"
requests=${UMA_EMB_REQUESTS:-16}
inputs=${UMA_EMB_INPUTS:-16}
words=${UMA_EMB_WORDS:-48}
bench_setup llama-server
client=bench/embeddings_client.py
up() { wait_ready "python3 -c 'import urllib.request,sys; sys.exit(urllib.request.urlopen(\"http://127.0.0.1:$port/health\").status != 200)'"; }

log "umad --http 127.0.0.1:$port (threads $threads, n_ctx $ctx)"
build/bin/umad --model "$model" --socket "$out/umad.sock" --http "127.0.0.1:$port" --threads "$threads" \
  --n-ctx "$ctx" --max-sessions 16 --max-tokens 512 2>"$out/umad.log" &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
up
python3 $client throughput "http://127.0.0.1:$port" 4 "$inputs" "$words" 4 >/dev/null  # warm: the embeddings context
for c in 1 4; do
  python3 $client throughput "http://127.0.0.1:$port" "$requests" "$inputs" "$words" $c | tee "$out/umad-c$c.json"
done
python3 $client itl "http://127.0.0.1:$port" 200 | tee "$out/umad-itl-alone.json"
python3 $client itl "http://127.0.0.1:$port" 200 1000 "$inputs" "$words" | tee "$out/umad-itl-burst.json"
kill -TERM $pid; wait $pid || true

log "llama-server --embeddings --pooling mean -np 4 -ub $ctx"
"$L/llama-server" -m "$model" -t "$threads" -c "$ctx" -np 4 -b "$ctx" -ub "$ctx" --embeddings --pooling mean \
  --host 127.0.0.1 --port "$port" --no-webui >"$out/llama-server.log" 2>&1 &
pid=$!
up
python3 $client throughput "http://127.0.0.1:$port" 4 "$inputs" "$words" 4 >/dev/null
for c in 1 4; do
  python3 $client throughput "http://127.0.0.1:$port" "$requests" "$inputs" "$words" $c | tee "$out/llama-server-c$c.json"
done
kill -TERM $pid; wait $pid || true
trap - EXIT
python3 - "$out" <<'PY'
import json, sys, pathlib
d = pathlib.Path(sys.argv[1])
for c in (1, 4):
    u = json.loads((d / f"umad-c{c}.json").read_text()); l = json.loads((d / f"llama-server-c{c}.json").read_text())
    print(f"c={c}: umad {u['inputs_per_s']} inputs/s ({u['tokens_per_s']} tok/s, {u['errors']} errors), "
          f"llama-server {l['inputs_per_s']} inputs/s ({l['tokens_per_s']} tok/s, {l['errors']} errors): "
          f"ratio {u['inputs_per_s'] / l['inputs_per_s']:.2f}")
a = json.loads((d / "umad-itl-alone.json").read_text()); b = json.loads((d / "umad-itl-burst.json").read_text())
print(f"umad stream ITL alone p50/p99/max {a['itl_p50_ms']}/{a['itl_p99_ms']}/{a['itl_max_ms']} ms; "
      f"beside an embeddings burst {b['itl_p50_ms']}/{b['itl_p99_ms']}/{b['itl_max_ms']} ms")
PY
