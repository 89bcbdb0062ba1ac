#!/usr/bin/env bash
# Restarts the Compose cluster's agents, then its gateways, one at a time, each only once the one
# before is healthy again: a new image or configuration rolled out with no request failed.
#   deploy/rolling-restart.sh [SERVICE...]     (default: agent-1 agent-2 gateway-1 gateway-2)
# Each `docker-compose restart` sends SIGTERM: an agent's umads drain (the gateways move their
# streams to the other agent, token-exactly) and a gateway finishes the streams it carries while
# nginx sends new requests to the other one; stop_grace_period (120 s) bounds both. Prints the
# seconds each service took to stop and to be healthy again.
# Env: COMPOSE (default: docker-compose -f deploy/compose.yaml), HEALTH_TIMEOUT_S (default 300).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
read -r -a compose <<<"${COMPOSE:-docker-compose -f $root/deploy/compose.yaml}"
services=("$@")
[ "${#services[@]}" -gt 0 ] || services=(agent-1 agent-2 gateway-1 gateway-2)

health_of() {
  local id
  id=$("${compose[@]}" ps -q "$1")
  [ -n "$id" ] || { echo missing; return; }
  docker inspect -f '{{if .State.Health}}{{.State.Health.Status}}{{else}}{{.State.Status}}{{end}}' "$id"
}

for s in "${services[@]}"; do
  t0=$(date +%s.%N)
  "${compose[@]}" stop -t 120 "$s" >/dev/null
  t1=$(date +%s.%N)
  "${compose[@]}" start "$s" >/dev/null
  deadline=$(($(date +%s) + ${HEALTH_TIMEOUT_S:-300}))
  until [ "$(health_of "$s")" = healthy ]; do
    if [ "$(date +%s)" -ge "$deadline" ]; then
      echo "$s: not healthy within ${HEALTH_TIMEOUT_S:-300} s (it says $(health_of "$s"))" >&2
      exit 1
    fi
    sleep 1
  done
  t2=$(date +%s.%N)
  awk -v s="$s" -v a="$t0" -v b="$t1" -v c="$t2" \
    'BEGIN { printf "%s: stopped (drained) in %.1f s, healthy again %.1f s after its start\n", s, b - a, c - b }'
done
