#!/usr/bin/env bash
# Speculative decoding: umad with and without it (prompt lookup; a draft model), and
# llama-server with and without its own (--spec-type ngram-simple; -md with draft-simple), same
# model files, threads and machine, one run. The target is the small preset built as the oracle
# (greedy next token = last + 1, the small shape's real cost), so that a copy workload really
# copies (bench/spec_client.py); the draft is the tiny preset built as the oracle agreeing on
# UMA_SPEC_AGREE (0.8) of the tokens (uma-mkmodel --agree).
#   bench/spec.sh [OUT_DIR]
# Env: UMA_SPEC_TOKENS (256, per request), UMA_SPEC_REQUESTS (3 per stream at c=1), UMA_SPEC_ROUNDS
# (2: every row on every server, alternated; the table gives each row's mean), and lib.sh's.
# Rows: copy (the gain), fresh (what lookup costs with nothing to find), decoy (every draft found
# is wrong: speculation must back off, never below 0.97x of none), each at c=1 and c=16; with the
# draft model, fresh at c=1 (its gain) and c=16. UMA_SPEC_ONLY=draft: the draft model's rows alone,
# on umad off / draft and llama-server none / -md (docs/BENCHMARKS.md's CPU draft-model row, in a third of the time).
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
# Every server runs from the start, each on its own port, and each row is measured on one server
# after the other, UMA_SPEC_ROUNDS times (the order reversed every other round): this machine's
# speed drifts over a run, and measured mode after mode, a mode's rows would take the drift with
# them. An idle server waits for work and costs the one measured nothing but memory.
rounds=${UMA_SPEC_ROUNDS:-2}
is_draft_row() { local x; for x in "${draft_rows[@]}"; do [ "$x" = "$1" ] && return 0; done; return 1; }
servers=()  # "LABEL PORT ROWS SOCKET": ROWS all or draft (the draft model's rows only); SOCKET - for none
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT
add_umad() {  # LABEL ROWS FLAGS...
  local label=$1 which=$2 p=$((port + ${#servers[@]})); shift 2
  local sock; sock=$(mktemp -u /tmp/uma-spec-XXXXXX.sock)
  log "$label: umad --threads $threads --n-ctx $ctx --max-sessions 16 --http 127.0.0.1:$p $*"
  build/bin/umad --model "$model" --socket "$sock" --threads "$threads" --n-ctx "$ctx" --max-sessions 16 \
    --max-tokens 512 --http "127.0.0.1:$p" "$@" 2>"$out/$label.log" &
  pids+=($!)
  wait_ready "build/bin/uma-cli -s $sock metrics"
  servers+=("$label $p $which $sock")
}
add_llama_server() {  # LABEL ROWS FLAGS...
  local label=$1 which=$2 p=$((port + ${#servers[@]})); shift 2
  log "$label: llama-server -t $threads -c $ctx -np 16 -kvu --port $p $*"
  "$L/llama-server" -m "$model" -t "$threads" -c "$ctx" -np 16 -kvu --host 127.0.0.1 --port "$p" --no-webui "$@" \
    >"$out/$label.log" 2>&1 &
  pids+=($!)
  wait_ready "python3 -c 'import urllib.request,sys; sys.exit(urllib.request.urlopen(\"http://127.0.0.1:$p/health\").status != 200)'"
  servers+=("$label $p $which -")
}
only_draft=0
[ "${UMA_SPEC_ONLY:-}" = draft ] && only_draft=1 all_rows=("${draft_rows[@]}")
add_umad umad-off all --speculative off
[ "$only_draft" = 1 ] || add_umad umad-lookup all --speculative lookup
add_umad umad-draft draft --speculative lookup --draft-model "$draft"
add_llama_server llama-server-none all --spec-type none
[ "$only_draft" = 1 ] || add_llama_server llama-server-ngram-simple all --spec-type ngram-simple
add_llama_server llama-server-draft-simple draft --spec-type draft-simple -md "$draft"
for r in $(seq "$rounds"); do
  spec_first=$((200 * (r - 1)))  # each round its own prompts: a server's cache must not answer them
  order=("${servers[@]}")
  if [ $((r % 2)) = 0 ]; then order=(); for ((i = ${#servers[@]} - 1; i >= 0; i--)); do order+=("${servers[i]}"); done; fi
  for w in "${all_rows[@]}"; do
    for s in "${order[@]}"; do
      read -r label p which _ <<<"$s"
      [ "$which" = draft ] && ! is_draft_row "$w" && continue
      url=http://127.0.0.1:$p
      spec_rows "$label" "$w"
    done
  done
done
for s in "${servers[@]}"; do
  read -r label _ _ sock <<<"$s"
  [ "$sock" != - ] && build/bin/uma-cli -s "$sock" metrics >"$out/$label.metrics.json" 2>/dev/null || true
done
kill -TERM "${pids[@]}" 2>/dev/null || true
wait "${pids[@]}" 2>/dev/null || true
trap - EXIT

python3 bench/spec_table.py "$out/rows.txt"
