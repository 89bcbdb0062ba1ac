#!/usr/bin/env bash
# The Compose cluster, built and run for real: builds the images (offline bundle, Debian base
# images, deploy/docker/Dockerfile), starts deploy/compose.yaml, registers the oracle model,
# streams completions through nginx with every stream checked (scripts/exact_load.py), restarts
# every agent and gateway in turn under that load (deploy/rolling-restart.sh), checks that
# Prometheus sees every target up, and tears it all down. Exit 0 when no request failed.
#   scripts/container_check.sh            (as root: it may start dockerd and installs what it needs)
# Not in CI: the image build compiles llama.cpp and the project again (~20 min on 2 cores).
# Env: UMA_KEEP_CLUSTER=1 leaves the cluster up; UMA_SKIP_IMAGE_BUILD=1 takes the uma-serve:latest
# already built; CLIENTS (3), MAX_TOKENS (24).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
log() { printf '[container-check %s] %s\n' "$(date +%T)" "$*" >&2; }
now() { date +%s; }
work=$(mktemp -d /tmp/uma-container-check.XXXXXX)
compose=(docker-compose -p uma-check -f "$root/deploy/compose.yaml")
started_dockerd=""
load_pid=""

cleanup() {
  set +e
  [ -z "$load_pid" ] || { touch "$work/stop"; wait "$load_pid"; }
  if [ -z "${UMA_KEEP_CLUSTER:-}" ]; then
    "${compose[@]}" down -v --timeout 5 >/dev/null 2>&1
    [ -z "$started_dockerd" ] || kill "$started_dockerd"
  fi
  rm -rf "$work"
}
trap cleanup EXIT

# The tools: Debian's docker.io (dockerd), docker-compose and mmdebstrap.
missing=()
for t in dockerd:docker.io docker-compose:docker-compose mmdebstrap:mmdebstrap; do
  command -v "${t%%:*}" >/dev/null || missing+=("${t#*:}")
done
if [ "${#missing[@]}" -gt 0 ]; then
  log "installing ${missing[*]} (Debian packages)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
fi
if ! docker info >/dev/null 2>&1; then
  # Every service is on the host network: no bridge and no iptables rules are needed.
  log "starting dockerd (host networking only)"
  dockerd --iptables=false --ip6tables=false --bridge=none >"$work/dockerd.log" 2>&1 &
  started_dockerd=$!
  deadline=$(($(now) + 60))
  until docker info >/dev/null 2>&1; do
    [ "$(now)" -lt "$deadline" ] || { log "dockerd did not start:"; tail -20 "$work/dockerd.log" >&2; exit 1; }
    sleep 1
  done
fi

t=$(now)
[ -f .bundle/SHA256SUMS ] || scripts/bundle.sh .bundle
for tag in build:bookworm-cpu runtime:bookworm-cpu ops:bookworm; do
  docker image inspect "uma-serve/$tag" >/dev/null 2>&1 || deploy/docker/base-image.sh --only "${tag%%:*}"
done
log "bundle and base images: $(($(now) - t)) s"
t=$(now)
# The Dockerfile's own ignore file needs BuildKit: Docker's own client brings it as buildx, Debian's
# docker.io client (/usr/bin/docker) has it built in. Host network: there is no bridge.
builder=docker
docker buildx version >/dev/null 2>&1 || builder=/usr/bin/docker
if [ -n "${UMA_SKIP_IMAGE_BUILD:-}" ] && docker image inspect uma-serve:latest >/dev/null 2>&1; then
  log "UMA_SKIP_IMAGE_BUILD: the uma-serve:latest already here"
else
  DOCKER_BUILDKIT=1 "$builder" build -q --network host -f deploy/docker/Dockerfile -t uma-serve:latest . >/dev/null
fi
log "uma-serve:latest ready in $(($(now) - t)) s, $(docker image inspect -f '{{.Size}}' uma-serve:latest | awk '{printf "%.0f MiB", $1 / 1048576}')"

# The oracle model, from the host's build (a fresh clone builds uma-mkmodel alone first).
mkmodel=${UMA_MKMODEL:-$root/build/bin/uma-mkmodel}
if [ ! -x "$mkmodel" ]; then
  log "building uma-mkmodel for the oracle model (scripts/setup.sh, then build/)"
  scripts/setup.sh >/dev/null
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build build -j "$(nproc)" --target uma-mkmodel >/dev/null
fi
mkdir -p "$work/models" && chmod 0777 "$work/models"
UMA_MKMODEL=$mkmodel UMA_MODELS_DIR=$work/tm scripts/make_test_models.sh >/dev/null
cp "$work/tm/oracle.gguf" "$work/models/oracle.gguf" && chmod 0666 "$work/models/oracle.gguf"
deploy/compose/make-secrets.sh >/dev/null

t=$(now)
export MODELS_DIR=$work/models AGENT_NVME_MB=2000 AGENT_DRAM_MB=256 AGENT_MODELS_MB=512 AGENT_KV_MB=256 AGENT_MEM_LIMIT=3g
"${compose[@]}" up -d --quiet-pull >/dev/null 2>&1 || "${compose[@]}" up -d
health_of() {
  local id
  id=$("${compose[@]}" ps -q "$1")
  [ -n "$id" ] || { echo missing; return; }
  docker inspect -f '{{if .State.Health}}{{.State.Health.Status}}{{else}}{{.State.Status}}{{end}}' "$id"
}
services=$("${compose[@]}" config --services)
deadline=$(($(now) + 300))
for s in $services; do
  until [ "$(health_of "$s")" = healthy ] || [ "$(health_of "$s")" = running ]; do
    [ "$(now)" -lt "$deadline" ] || { log "$s is $(health_of "$s") after 300 s:"; "${compose[@]}" logs --tail 30 "$s" >&2; exit 1; }
    sleep 2
  done
done
log "cluster up and healthy in $(($(now) - t)) s: $(echo "$services" | tr '\n' ' ')"

docker run --rm --network host -u 0 -v "$work/models:/m" -v "$root/deploy/secrets:/s:ro" uma-serve:latest \
  store --redis-password-file /s/redis-password add /m/oracle.gguf --id oracle \
  --url http://127.0.0.1:8090/oracle.gguf --redis 127.0.0.1:6390 >/dev/null

python3 scripts/exact_load.py --url http://127.0.0.1:8000 --key-file deploy/secrets/api-key --model oracle \
  --clients "${CLIENTS:-3}" --max-tokens "${MAX_TOKENS:-24}" --summary "$work/load.json" --stop-file "$work/stop" \
  >"$work/load.out" 2>&1 &
load_pid=$!
served() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["ok"])' "$work/load.json" 2>/dev/null || echo 0; }
wait_served() {  # $1 more requests served than now, or fail
  local want=$(($(served) + $1)) deadline=$(($(now) + 300))
  until [ "$(served)" -ge "$want" ]; do
    kill -0 "$load_pid" 2>/dev/null || { log "the load stopped:"; cat "$work/load.out" >&2; exit 1; }
    [ "$(now)" -lt "$deadline" ] || { log "the load made no progress in 300 s"; exit 1; }
    sleep 1
  done
}
wait_served 6
log "load running: $(cat "$work/load.json")"

COMPOSE="${compose[*]}" deploy/rolling-restart.sh
wait_served 6
touch "$work/stop"
load_rc=0
wait "$load_pid" || load_rc=$?
load_pid=""
log "load: $(cat "$work/load.json")"

# Prometheus: every target up (restarted ones within a few scrapes).
deadline=$(($(now) + 120))
until python3 - <<'EOF'
import json, sys, urllib.request
t = json.load(urllib.request.urlopen("http://127.0.0.1:9090/api/v1/targets", timeout=5))["data"]["activeTargets"]
down = [x["scrapeUrl"] + " " + x["health"] for x in t if x["health"] != "up"]
print("prometheus: %d targets, %d not up %s" % (len(t), len(down), down), file=sys.stderr)
sys.exit(1 if down or not t else 0)
EOF
do
  [ "$(now)" -lt "$deadline" ] || { log "Prometheus does not see every target up"; exit 1; }
  sleep 5
done
[ "$load_rc" -eq 0 ] || { log "requests failed during the rolling restart"; exit 1; }
log "passed"
