#!/usr/bin/env bash
# scripts/cluster.sh as a user runs it: up 2 prints the gateway's URL last; a completion goes
# through; an agent killed from agents.pids is routed around; down leaves no process behind.
#   tests/scripts/cluster_script_test.sh BUILD_DIR
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
export UMA_BUILD=$1 UMA_MODEL=$1/models/oracle.gguf UMA_AGENT_FLAGS="--threads 1"
export UMA_CLUSTER_DIR; UMA_CLUSTER_DIR=$(mktemp -d /tmp/uma-cluster-test-XXXXXX)
trap '"$root/scripts/cluster.sh" down; rm -rf "$UMA_CLUSTER_DIR"' EXIT
url=$("$root/scripts/cluster.sh" up 2 | tail -1)
[[ $url =~ ^http://127\.0\.0\.1:[0-9]+$ ]] || { echo "not a URL: $url"; exit 1; }
complete() {
  python3 - "$url" <<'PY'
import json, sys, urllib.request
req = urllib.request.Request(sys.argv[1] + "/v1/completions", json.dumps({"prompt": "hello world", "max_tokens": 8}).encode(),
                             {"Content-Type": "application/json"})
r = json.load(urllib.request.urlopen(req, timeout=120))  # a hang guard, never a speed target
assert r["usage"]["completion_tokens"] == 8, r
print(r["choices"][0]["text"].encode().hex())
PY
}
first=$(complete)
mapfile -t pids <"$UMA_CLUSTER_DIR/agents.pids"
[ "${#pids[@]}" -eq 2 ] || { echo "agents.pids holds ${#pids[@]} pids"; exit 1; }
kill -9 "${pids[0]}"
for _ in 1 2 3 4; do [ "$(complete)" = "$first" ] || { echo "a different completion after the kill"; exit 1; }; done
all=$(cat "$UMA_CLUSTER_DIR"/*.pid "$UMA_CLUSTER_DIR/agents.pids")
"$root/scripts/cluster.sh" down
# down SIGKILLs what outlived its grace: each goes once the kernel has reaped it (120 s at most).
for p in $all; do
  for _ in $(seq 1200); do kill -0 "$p" 2>/dev/null || continue 2; sleep 0.1; done
  echo "pid $p still running after down"; exit 1
done
echo "cluster.sh: up, served, survived a killed agent, down"
