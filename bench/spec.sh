#!/usr/bin/env bash
# Speculative decoding (issue 33): umad with and without it (prompt lookup; a draft model), and
# llama-server with and without its own (--spec-type ngram-simple; -md with draft-simple), same
# model files, threads and machine, one run. The target is the small preset built as the oracle
# (greedy next token = last + 1, the small shape's real cost), so that a copy workload really
# copies (bench/spec_client.py); the draft is the tiny preset built as the oracle agreeing on
# UMA_SPEC_AGREE (0.8) of the tokens (uma-mkmodel --agree).
#   bench/spec.sh [OUT_DIR]
# Env: UMA_SPEC_TOKENS (256, per request), UMA_SPEC_REQUESTS (3 per stream at c=1), and lib.sh's.
# Rows: copy (the gain), fresh (what lookup costs with nothing to find), decoy (every draft found
# is wrong: speculation must back off, never below 0.97x of none), each at c=1 and c=16; with the
# draft model, fresh at c=1 (its gain) and c=16.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
. bench/lib.sh
out=${1:-$(mktemp -d /tmp/uma-spec-XXXXXX)}
mkdir -p "$out"
bench_setup llama-server
model=build/models/small-oracle-q8_0.gguf
[ -s "$model" ] || build/bin/uma-mkmodel --preset small --oracle --type q8_0 --seed 1 -o "$model" >/dev/null
agree=${UMA_SPEC_AGREE:-0.8}
draft=build/models/tiny-oracle-agree$agree-q8_0.gguf
[ -s "$draft" ] || build/bin/uma-mkmodel --preset tiny --oracle --agree "$agree" --type q8_0 --seed 2 -o "$draft" >/dev/null
tokens=${UMA_SPEC_TOKENS:-256}
reqs=${UMA_SPEC_REQUESTS:-3}
url=http://127.0.0.1:$port

all_rows=("copy 1 $reqs $tokens" "fresh 1 $reqs $tokens" "decoy 1 $reqs $tokens" "copy 16 1 128" "fresh 16 1 128" "decoy 16 1 128")
draft_rows=("fresh 1 $reqs $tokens" "fresh 16 1 128")
. bench/spec_rows.sh

: >"$out/rows.txt"
for mode in off lookup draft; do
  log "umad --speculative $mode"
  sock=$(mktemp -u /tmp/uma-spec-XXXXXX.sock)
  if [ "$mode" = draft ]; then
    start_umad "$sock" "$out/umad-$mode.log" --http "127.0.0.1:$port" --speculative lookup --draft-model "$draft"
    spec_rows "umad-$mode" "${draft_rows[@]}"
  else
    start_umad "$sock" "$out/umad-$mode.log" --http "127.0.0.1:$port" --speculative "$mode"
    spec_rows "umad-$mode" "${all_rows[@]}"
  fi
  build/bin/uma-cli -s "$sock" metrics >"$out/umad-$mode.metrics.json" 2>/dev/null || true
  stop_server
done
for spec in none ngram-simple draft-simple; do
  log "llama-server --spec-type $spec"
  extra=()
  [ "$spec" = draft-simple ] && extra=(-md "$draft")
  "$L/llama-server" -m "$model" -t "$threads" -c "$ctx" -np 16 -kvu --host 127.0.0.1 --port "$port" --no-webui \
    --spec-type "$spec" "${extra[@]}" >"$out/llama-server-$spec.log" 2>&1 &
  pid=$!
  trap 'kill $pid 2>/dev/null || true' EXIT
  wait_ready "python3 -c 'import urllib.request,sys; sys.exit(urllib.request.urlopen(\"$url/health\").status != 200)'"
  if [ "$spec" = draft-simple ]; then spec_rows "llama-server-$spec" "${draft_rows[@]}"; else spec_rows "llama-server-$spec" "${all_rows[@]}"; fi
  stop_server
done

python3 bench/spec_table.py "$out/rows.txt"
