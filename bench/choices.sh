#!/usr/bin/env bash
# n choices: one /v1/completions request with n = 4 against n = 1, on a ~1000-token
# prompt, with the prefix cache (the choices share the prompt's KV: one prefill) and without it
# (every choice prefills the prompt). Wall time of the whole response and the prompt tokens the
# cache served, alternating, same run; llama-server with the same request as the reference.
#   bench/choices.sh [ROUNDS] [OUT_DIR]      (default 2, build/bench-choices)
# Env: bench/lib.sh's.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
# shellcheck source=bench/lib.sh
source bench/lib.sh
rounds=${1:-2}
out=${2:-build/bench-choices}
mkdir -p "$out"
bench_setup llama-server
prompt=$(python3 -c "import random; r=random.Random(7); print(' '.join(r.choice(['alpha','river','stone','cloud','maple','tiger','ocean','piano','delta','quartz']) for _ in range(1000)))")
printf '%s' "$prompt" >"$out/prompt.txt"

# POSTs the prompt with n choices to $1 (base URL); prints "seconds choices".
ask() {
  python3 - "$1" "$2" "$out/prompt.txt" <<'PY'
import http.client, json, sys, time, urllib.parse
base, n, prompt = sys.argv[1], int(sys.argv[2]), open(sys.argv[3]).read()
u = urllib.parse.urlparse(base)
c = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
body = json.dumps({"prompt": prompt, "max_tokens": 16, "n": n, "temperature": 0})
t = time.perf_counter()
c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
r = json.loads(c.getresponse().read())
print(f"{time.perf_counter() - t:.3f} {len(r.get('choices', []))}")
PY
}
reused() { build/bin/uma-cli -s "$1" metrics | python3 -c "import json,sys; print(json.load(sys.stdin)['prefix_cache']['reused_tokens_total'])"; }

results=$out/results.txt
: >"$results"
for r in $(seq "$rounds"); do
  for mode in cache nocache; do
    flags=(--http "127.0.0.1:$port")
    [ $mode = nocache ] && flags+=(--no-prefix-cache)
    for n in 1 4; do  # a fresh umad each: nothing of this prompt kept from before
      start_umad "$out/umad.sock" "$out/umad-$mode.log" "${flags[@]}"
      read -r secs got < <(ask "http://127.0.0.1:$port" "$n")
      echo "round $r umad $mode n=$n: ${secs} s, $got choices, prompt tokens from the cache: $(reused "$out/umad.sock")" \
        | tee -a "$results"
      stop_server
    done
  done
  for n in 1 4; do
    start_llama_server "$out/llama-server.log"
    read -r secs got < <(ask "http://127.0.0.1:$port" "$n")
    echo "round $r llama-server n=$n: ${secs} s, $got choices" | tee -a "$results"
    stop_server
  done
done
