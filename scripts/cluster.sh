#!/usr/bin/env bash
# A local cluster in one command: redis-server (Debian's) on a free loopback port, N umad
# agents serving one model, and a uma-gw gateway in front of them.
#   UMA_MODEL=FILE scripts/cluster.sh up N     last line printed: the gateway's base URL
#   scripts/cluster.sh down                    stops everything it started
# State (pids, logs, sockets) lives in $UMA_CLUSTER_DIR (default /tmp/uma-cluster-$USER); the agents'
# pids are in $UMA_CLUSTER_DIR/agents.pids, one per line (a test can kill one).
# Env: UMA_BUILD (build dir, default build), UMA_AGENT_FLAGS (more umad flags, e.g. "--threads 1"),
#      UMA_GW_FLAGS (more uma-gw flags, e.g. "--policy round-robin"), UMA_GW_PORT (default: any free),
#      UMA_AGENT_GPUS (e.g. "0 1 2 3": agent i sees only GPU i mod 4, through CUDA_VISIBLE_DEVICES).
# redis-server comes from Debian (scripts/setup.sh), or from an offline bundle's packages
# (scripts/setup.sh --from-bundle) on a machine without it.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dir=${UMA_CLUSTER_DIR:-/tmp/uma-cluster-${USER:-uma}}
bdir=${UMA_BUILD:-$root/build}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
http_ok() { python3 -c "import urllib.request,sys; sys.exit(urllib.request.urlopen('$1', timeout=2).status != 200)" 2>/dev/null; }
wait_until() {  # $1 = what, $2 = command; 60 s at most
  for _ in $(seq 600); do eval "$2" && return 0; sleep 0.1; done
  echo "cluster.sh: $1 did not come up (logs in $dir)" >&2
  return 1
}

# Debian's redis-server and redis-cli, else the ones an offline bundle unpacked (with their libraries).
redis_env=()
if ! command -v redis-server >/dev/null; then
  prefix=$("$root/scripts/llama.sh" --print-prefix)
  if [ -n "$prefix" ] && [ -x "$prefix/usr/bin/redis-server" ]; then
    redis_env=(env "PATH=$prefix/usr/bin:$PATH" "LD_LIBRARY_PATH=$prefix/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}")
  fi
fi

down() {
  [ -d "$dir" ] || return 0
  for f in gw.pid agents.pids redis.pid; do
    [ -f "$dir/$f" ] || continue
    while read -r p; do kill -TERM "$p" 2>/dev/null || true; done <"$dir/$f"
  done
  for f in gw.pid agents.pids redis.pid; do
    [ -f "$dir/$f" ] || continue
    while read -r p; do
      for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
      kill -KILL "$p" 2>/dev/null || true
    done <"$dir/$f"
    rm -f "$dir/$f"
  done
}

up() {
  local n=$1
  : "${UMA_MODEL:?set UMA_MODEL to the GGUF the agents serve}"
  [ -s "$UMA_MODEL" ] || { echo "cluster.sh: no model at $UMA_MODEL" >&2; exit 1; }
  if [ ! -x "$bdir/bin/umad" ] || [ ! -x "$bdir/bin/uma-gw" ]; then
    "$root/scripts/setup.sh" >&2
    cmake -S "$root" -B "$bdir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
    cmake --build "$bdir" -j "$(nproc)" --target umad uma-gw >&2
  fi
  down
  mkdir -p "$dir"
  local rport; rport=$(free_port)
  "${redis_env[@]}" redis-server --bind 127.0.0.1 --port "$rport" --save '' --appendonly no >"$dir/redis.log" 2>&1 &
  echo $! >"$dir/redis.pid"
  wait_until redis "${redis_env[*]} redis-cli -p $rport ping >/dev/null 2>&1"
  : >"$dir/agents.pids"
  # shellcheck disable=SC2206
  local gpus=(${UMA_AGENT_GPUS:-})
  for i in $(seq "$n"); do
    local aport; aport=$(free_port)
    local gpu_env=()
    [ ${#gpus[@]} -gt 0 ] && gpu_env=(env "CUDA_VISIBLE_DEVICES=${gpus[$(((i - 1) % ${#gpus[@]}))]}")
    # shellcheck disable=SC2086
    "${gpu_env[@]}" "$bdir/bin/umad" --model "$UMA_MODEL" --socket "$dir/agent$i.sock" --http "127.0.0.1:$aport" --agent \
      --redis "127.0.0.1:$rport" ${UMA_AGENT_FLAGS:-} >"$dir/agent$i.log" 2>&1 &
    echo $! >>"$dir/agents.pids"
    echo "$aport" >"$dir/agent$i.port"
  done
  for i in $(seq "$n"); do wait_until "agent $i" "http_ok http://127.0.0.1:$(cat "$dir/agent$i.port")/health"; done
  local gport=${UMA_GW_PORT:-$(free_port)}
  # shellcheck disable=SC2086
  "$bdir/bin/uma-gw" --model "$UMA_MODEL" --redis "127.0.0.1:$rport" --listen "127.0.0.1:$gport" ${UMA_GW_FLAGS:-} \
    >"$dir/gw.log" 2>&1 &
  echo $! >"$dir/gw.pid"
  local url="http://127.0.0.1:$gport"
  wait_until "the gateway with $n live agents" \
    "python3 -c \"import json,urllib.request,sys; sys.exit(json.load(urllib.request.urlopen('$url/health', timeout=2)).get('live') != $n)\" 2>/dev/null"
  echo "127.0.0.1:$rport" >"$dir/redis.address"
  echo "redis 127.0.0.1:$rport, $n agents (pids in $dir/agents.pids), logs in $dir" >&2
  echo "$url"
}

case "${1:-}" in
  up) up "${2:?usage: scripts/cluster.sh up N}" ;;
  down) down ;;
  *) echo "usage: UMA_MODEL=FILE scripts/cluster.sh up N | scripts/cluster.sh down" >&2; exit 2 ;;
esac
