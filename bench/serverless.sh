#!/usr/bin/env bash
# The serverless workload (docs/BENCHMARKS.md "Serverless"): more models than agents can
# hold, requests with a Zipf popularity over the models and Poisson arrivals through one gateway,
# every model in the catalog with nginx as the remote tier (limit_rate per connection emulates a
# link) and half of them on each agent's NVMe tier at the start. One run per load placement policy
# (the gateway's --load-policy: predicted | round-robin | random; "POLICY+fan-out" adds the
# gateway's fan-out, --fan-out 2 --fan-out-rps UMA_SL_FANOUT_RPS; without it, fan-out is off), each on fresh agents (DRAM
# empty, NVMe tiers back to the starting placement): TTFT p50/p90/p99 at the client, loads per
# minute, requests failed (must be 0), and the L term's median prediction error (the gateway's).
# Env: UMA_SL_MODELS (12), UMA_SL_AGENTS (2), UMA_SL_PRESET (small:q8_0), UMA_SL_RATE (1.5 req/s),
#      UMA_SL_SECONDS (120), UMA_SL_ZIPF (1.1), UMA_SL_HOLD (3: models an agent keeps loaded),
#      UMA_SL_DRAM (3: images an agent keeps in host memory), UMA_SL_LINK_MBIT (800),
#      UMA_SL_POLICIES ("predicted predicted+fan-out round-robin random"), UMA_SL_FANOUT_RPS (0.2),
#      UMA_SL_THREADS (1: per umad),
#      UMA_SL_GPU_LAYERS (unset: umad's default), UMA_SL_GPUS ("0 1": agent i sees GPU i alone),
#      UMA_SL_COPIES (0; 1: the models are copies of one file under different ids: the same cost,
#      a fraction of the time to make), UMA_SL_DIR (build/serverless).
# Without nginx (an offline GPU machine) there is no remote tier: every agent's NVMe tier holds
# every model at the start and only the DRAM tier and what is loaded tell agents apart.
set -euo pipefail
cd "$(dirname "$0")/.."
n_models=${UMA_SL_MODELS:-12}
n_agents=${UMA_SL_AGENTS:-2}
preset=${UMA_SL_PRESET:-small:q8_0}
rate=${UMA_SL_RATE:-1.5}
seconds=${UMA_SL_SECONDS:-120}
zipf=${UMA_SL_ZIPF:-1.1}
hold=${UMA_SL_HOLD:-3}
dram=${UMA_SL_DRAM:-3}
link_mbit=${UMA_SL_LINK_MBIT:-800}
policies=${UMA_SL_POLICIES:-predicted predicted+fan-out round-robin random}
fanout_rps=${UMA_SL_FANOUT_RPS:-0.2}
threads=${UMA_SL_THREADS:-1}
work=${UMA_SL_DIR:-$PWD/build/serverless}
bdir=build${UMA_GPU:+-$UMA_GPU}
log() { printf '== %s\n' "$*" >&2; }

scripts/setup.sh >/dev/null
cmake -S . -B "$bdir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$bdir" -j "$(nproc)" --target umad uma-agent uma-gw uma-store uma-mkmodel >/dev/null
B=$PWD/$bdir/bin
mkdir -p "$work/models" "$work/www" "$work/run"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  [ -f "$work/run/nginx.pid" ] && kill "$(cat "$work/run/nginx.pid")" 2>/dev/null || true
}
trap cleanup EXIT
fetch() { python3 -c 'import sys,urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())' "$1"; }
wait_until() { for _ in $(seq 600); do eval "$1" >/dev/null 2>&1 && return 0; sleep 0.1; done; log "timed out: $1"; return 1; }

# Models: different seeds, so different bytes (and hashes) of one realistic shape.
shape=${preset%%:*}; type=${preset##*:}
ids=()
for k in $(seq 0 $((n_models - 1))); do
  id=m$k; ids+=("$id")
  f=$work/models/$id.gguf
  if [ ! -s "$f" ] && [ "${UMA_SL_COPIES:-0}" = 1 ] && [ "$k" -gt 0 ]; then
    cp "$work/models/m0.gguf" "$f"
  elif [ ! -s "$f" ]; then
    "$B/uma-mkmodel" --preset "$shape" --type "$type" --seed $((k + 1)) -o "$f" >/dev/null
  fi
  ln -f "$f" "$work/www/$id.gguf" 2>/dev/null || cp -f "$f" "$work/www/$id.gguf"
done
bytes=$(stat -c %s "$work/models/m0.gguf")
# Debian's redis-server, else the one an offline bundle unpacked (with its libraries).
if ! command -v redis-server >/dev/null; then
  prefix=$(scripts/llama.sh --print-prefix)
  export PATH=$prefix/usr/bin:$PATH LD_LIBRARY_PATH=$prefix/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
fi
have_nginx=1; [ -x /usr/sbin/nginx ] || have_nginx=0
# shellcheck disable=SC2206
gpus=(${UMA_SL_GPUS:-})

# The remote tier: nginx on loopback; the store fetches over 8 connections, each limited.
nport=$(free_port)
[ "$have_nginx" = 1 ] && cat >"$work/run/nginx.conf" <<CONF
daemon on; worker_processes 2; pid $work/run/nginx.pid; error_log $work/run/nginx-error.log;
events { worker_connections 256; }
http { access_log off; sendfile on; client_body_temp_path $work/run; proxy_temp_path $work/run;
  fastcgi_temp_path $work/run; uwsgi_temp_path $work/run; scgi_temp_path $work/run;
  server { listen 127.0.0.1:$nport; root $work/www; location / { limit_rate $((link_mbit * 125000 / 8)); } } }
CONF
[ "$have_nginx" = 1 ] && /usr/sbin/nginx -c "$work/run/nginx.conf" -p "$work/run" -e "$work/run/nginx-error.log"

rport=$(free_port)
redis-server --bind 127.0.0.1 --port "$rport" --save '' --appendonly no >"$work/run/redis.log" 2>&1 &
pids+=($!)
wait_until "redis-cli -p $rport ping"
for id in "${ids[@]}"; do
  url=""; [ "$have_nginx" = 1 ] && url=http://127.0.0.1:$nport/$id.gguf
  "$B/uma-store" add "$work/models/$id.gguf" --id "$id" --url "$url" --redis "127.0.0.1:$rport" >/dev/null
done
models_csv=$(IFS=,; echo "${ids[*]}")
budget_mb=$(( (bytes * hold + bytes / 2) >> 20 ))
dram_mb=$(( (bytes * dram + bytes / 2) >> 20 ))
link="link $link_mbit Mbit/s"; [ "$have_nginx" = 1 ] || link="no remote tier (no nginx): every model on every NVMe tier"
log "$n_models models of $((bytes >> 20)) MiB ($preset), $n_agents agents holding $hold loaded ($budget_mb MiB) and $dram in DRAM; $link; $rate req/s for $seconds s, Zipf $zipf"

results=$work/results.jsonl
: >"$results"
for policy in $policies; do
  agent_pids=(); agent_ports=()
  for a in $(seq 0 $((n_agents - 1))); do
    dir=$work/nvme-$a
    rm -rf "$dir" "$work/run/agent-$a"; mkdir -p "$dir"
    # The starting placement: model k on agent k mod n_agents's NVMe tier.
    for k in $(seq 0 $((n_models - 1))); do
      if [ "$have_nginx" = 0 ] || [ $((k % n_agents)) = "$a" ]; then cp "$work/models/m$k.gguf" "$dir/m$k.gguf"; fi
    done
    port=$(free_port)
    env ${gpus[$a]:+CUDA_VISIBLE_DEVICES=${gpus[$a]}} "$B/uma-agent" --cluster --listen "127.0.0.1:$port" --redis "127.0.0.1:$rport" --store-dir "$dir" \
      --store-dram-mb "$dram_mb" --models-mb "$budget_mb" --keep-alive 10m --run-dir "$work/run/agent-$a" \
      -- --threads "$threads" --n-ctx 2048 --max-sessions 8 --max-tokens 64 ${UMA_SL_GPU_LAYERS:+--gpu-layers $UMA_SL_GPU_LAYERS} \
      >"$work/run/agent-$a.log" 2>&1 &
    agent_pids+=($!); pids+=($!); agent_ports+=("$port")
  done
  gport=$(free_port)
  fan_out=(--fan-out 1)
  [ "${policy%+fan-out}" != "$policy" ] && fan_out=(--fan-out 2 --fan-out-rps "$fanout_rps")
  "$B/uma-gw" --model "$work/models/m0.gguf" --redis "127.0.0.1:$rport" --listen "127.0.0.1:$gport" --refresh-ms 100 \
    --load-policy "${policy%+fan-out}" "${fan_out[@]}" --queue-timeout-ms 120000 >"$work/run/gw-$policy.log" 2>&1 &
  gw=$!; pids+=($gw)
  wait_until "fetch http://127.0.0.1:$gport/metrics | grep -q '^uma_gw_loaders $n_agents'"
  log "policy $policy"
  summary=$(python3 bench/serverless_client.py "http://127.0.0.1:$gport" "$models_csv" "$rate" "$seconds" --zipf "$zipf")
  loads=0
  for p in "${agent_ports[@]}"; do
    l=$(fetch "http://127.0.0.1:$p/metrics" | awk '/^uma_agent_loads_total /{print $2}')
    loads=$((loads + ${l:-0}))
  done
  err=$(fetch "http://127.0.0.1:$gport/metrics" | awk '/^uma_gw_load_prediction_error_median /{print $2}')
  prefetches=$(fetch "http://127.0.0.1:$gport/metrics" | awk '/^uma_gw_prefetches_total /{print $2}')
  echo "$summary" | python3 -c "
import json,sys; s=json.load(sys.stdin); s.update(policy='$policy', loads=$loads, loads_per_min=$loads*60.0/s['wall_s'],
    prefetches=int(float('${prefetches:-0}')), load_prediction_error_median=float('${err:-nan}')); print(json.dumps(s))" | tee -a "$results"
  kill -TERM "$gw" "${agent_pids[@]}" 2>/dev/null || true
  for p in "$gw" "${agent_pids[@]}"; do wait "$p" 2>/dev/null || true; done
  redis-cli -p "$rport" del uma:loaders >/dev/null
done

python3 - "$results" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("| policy | requests | failed | TTFT p50 ms | p90 ms | p99 ms | loads/min | prefetches | L error median |")
print("|---|---|---|---|---|---|---|---|---|")
for r in rows:
    t = r["ttft_ms"]
    print(f"| {r['policy']} | {r['requests']} | {r['failed']} | {t['p50']:.0f} | {t['p90']:.0f} | {t['p99']:.0f} | "
          f"{r['loads_per_min']:.1f} | {r.get('prefetches', 0)} | {r['load_prediction_error_median']:.2f} |")
PY
