#!/usr/bin/env bash
# The soak test, one command (not part of CI): umad on the oracle model with both front
# ends, and uma-soak driving it for UMA_SOAK_MINUTES with UMA_SOAK_CLIENTS concurrent clients (half
# over the Unix socket, half over the OpenAI HTTP API): exact completions streamed or not, cancels,
# disconnects mid-stream, slow readers, malformed requests. It asserts 0 unexpected errors, every
# stream exact, KV back to 0, RSS growth <= 2% after warm-up, descriptors back to baseline, and
# that umad then exits cleanly on SIGTERM. Exit status 0 only if all hold. docs/BENCHMARKS.md, "Soak".
#   bench/soak.sh [OUT_DIR]      (default $UMA_BUILD_DIR/bench-soak)
# Env: UMA_SOAK_MINUTES (30), UMA_SOAK_SECONDS (instead of minutes, for short runs),
#      UMA_SOAK_CLIENTS (32), UMA_SOAK_SEED (1), UMA_SOAK_WARMUP (seconds; default 120, at most
#      half the run), UMA_SOAK_THREADS (umad --threads, 1: the driver needs a core too, and
#      the oracle model is tiny), UMA_BUILD_DIR (build),
#      UMA_SOAK_SKIP_BUILD (1: use the binaries already in UMA_BUILD_DIR), UMA_UMAD_ARGS (more flags).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
build=${UMA_BUILD_DIR:-build}
out=${1:-$build/bench-soak}
if [ -n "${UMA_SOAK_SECONDS:-}" ]; then secs=$UMA_SOAK_SECONDS; else secs=$(( ${UMA_SOAK_MINUTES:-30} * 60 )); fi
clients=${UMA_SOAK_CLIENTS:-32}
threads=${UMA_SOAK_THREADS:-1}
ctx=32768
mkdir -p "$out"
log() { printf '\n== %s\n' "$*" >&2; }

if [ "${UMA_SOAK_SKIP_BUILD:-0}" != 1 ]; then
  log "setup and build ($build)"
  scripts/setup.sh >/dev/null
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build "$build" -j "$(nproc)" --target umad uma-soak uma-mkmodel >/dev/null
fi
model=$build/models/oracle.gguf
mkdir -p "$build/models"
[ -s "$model" ] || "$build/bin/uma-mkmodel" --preset oracle --type f32 --seed 1 -o "$model" >/dev/null

tmp=$(mktemp -d)
sock=$tmp/umad.sock
pid=
cleanup() {
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then kill -TERM "$pid"; wait "$pid" || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT

# Sized so that nothing this workload sends is refused for want of room: 64 sessions per front end
# for 32 clients (a closing connection may hold its slot a moment), a context that holds the usual
# worst case (slow readers ask for up to 768 tokens), and a wait for room never long enough to be
# E_OVERLOADED. The TX cap is small (16 KiB) so slow readers really get dropped, yet above the
# largest reply a fast client gets (48 tokens of SSE). The prompt and body limits leave room for a
# prompt longer than the context (the E_LIMIT_CONTEXT case). The prefix cache is on (the
# default), its host memory small, so it fills during warm-up.
umad_args=(--model "$model" --socket "$sock" --http 127.0.0.1:0 --chat-template chatml --threads "$threads"
  --n-ctx "$ctx" --max-sessions 64 --max-connections 512 --max-tokens 1024 --max-prompt-bytes 262144
  --http-max-body-kib 512 --max-tx-kib 16 --max-queue 256 --max-queue-ms 120000 --prefix-cache-mb 8)
# shellcheck disable=SC2206
umad_args+=(${UMA_UMAD_ARGS:-})
log "umad ${umad_args[*]}"
"$build/bin/umad" "${umad_args[@]}" 2>"$out/umad.log" &
pid=$!
port=
for _ in $(seq 600); do
  port=$(sed -n 's/.*http listening on [0-9.]*:\([0-9]*\).*/\1/p' "$out/umad.log" | head -1)
  [ -n "$port" ] && break
  kill -0 "$pid" 2>/dev/null || { echo "umad exited at start:" >&2; cat "$out/umad.log" >&2; exit 1; }
  sleep 0.1
done
[ -n "$port" ] || { echo "umad did not report its HTTP port" >&2; exit 1; }

every=5; [ "$secs" -lt 600 ] && every=2
soak_args=(--socket "$sock" --http "127.0.0.1:$port" --pid "$pid" --model "$model" --clients "$clients"
  --duration "${secs}s" --sample-every "$every" --seed "${UMA_SOAK_SEED:-1}" --n-ctx "$ctx" --max-tokens 1024
  --max-prompt-bytes 262144 --http-max-body-kib 512 --samples-csv "$out/samples.csv" --json-out "$out/result.json")
[ -n "${UMA_SOAK_WARMUP:-}" ] && soak_args+=(--warmup "${UMA_SOAK_WARMUP}s")
log "uma-soak ${soak_args[*]}"
rc=0
"$build/bin/uma-soak" "${soak_args[@]}" | tee "$out/summary.txt" || rc=$?

# Last assertion: a clean shutdown (SIGTERM -> exit 0) after all that.
if kill -0 "$pid" 2>/dev/null; then
  kill -TERM "$pid"
  urc=0
  wait "$pid" || urc=$?
  pid=
  if [ "$urc" -ne 0 ]; then
    echo "FAIL  umad_clean_exit             umad exited $urc on SIGTERM (log: $out/umad.log)" | tee -a "$out/summary.txt"
    rc=1
  else
    echo "PASS  umad_clean_exit             umad exited 0 on SIGTERM" | tee -a "$out/summary.txt"
  fi
else
  echo "FAIL  umad_clean_exit             umad was not running at the end (log: $out/umad.log)" | tee -a "$out/summary.txt"
  grep -m3 -E "terminate called|what\(\)|critical|error" "$out/umad.log" >&2 || true
  rc=1
fi
echo "output: $out (summary.txt, result.json, samples.csv, umad.log)" >&2
exit "$rc"
