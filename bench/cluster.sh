#!/usr/bin/env bash
# The cluster (scripts/cluster.sh) under a shared-prefix workload modelled on
# llm-d's and SGLang's (G groups of users, each group with its own long system prompt, each user a
# multi-turn conversation: uma-bench --workload groups), one fresh cluster per routing policy:
# TTFT p50/p90 and tok/s for predicted, round-robin, least-loaded and seed; then, on one agent,
# the gateway's overhead (TTFT through it vs straight to the agent, short prompts, interleaved
# rounds) and its routing decision time with 64 registered agents (63 more registered in Redis,
# each pointing at the real one: every decision matches the prompt against 64 block sets);
# the predicted-vs-measured TTFT error is the gateway's own metric.
#   bench/cluster.sh [OUT_DIR]       (default build/bench-cluster)
# Env: bench/lib.sh's (UMA_BENCH_MODEL: small preset Q8_0), UMA_CLUSTER_AGENTS (3),
#      UMA_CLUSTER_GROUPS (4), UMA_CLUSTER_USERS (3), UMA_CLUSTER_PREFIX (1000 tokens),
#      UMA_CLUSTER_REQUESTS (36), UMA_CLUSTER_CONC (3), UMA_AGENT_THREADS (1; GPU: all layers on it),
#      UMA_CLUSTER_POLICIES ("predicted round-robin least-loaded seed"), UMA_CLUSTER_SUFFIX (30
#      tokens a turn), UMA_CLUSTER_OUTPUT (16 tokens), UMA_CLUSTER_SESSIONS (16: each agent's
#      --max-sessions), UMA_CLUSTER_OVERHEAD (1; 0 skips the overhead and decision-time part),
#      UMA_CLUSTER_OVERHEAD_N (200 requests in each of its 4 rounds a side),
#      UMA_AGENT_GPUS (scripts/cluster.sh: "0 1 2 3" gives agent i GPU i mod 4), UMA_AGENT_EXTRA (more
#      umad flags for every agent), UMA_CLUSTER_GW_EXTRA (more uma-gw flags).
# docs/BENCHMARKS.md's routing rows ("Routing policies on this CPU"): UMA_CLUSTER_GROUPS=12
#      UMA_CLUSTER_USERS=2 UMA_CLUSTER_REQUESTS=240 UMA_CLUSTER_POLICIES="predicted round-robin"
#      UMA_CLUSTER_OVERHEAD=0 bench/cluster.sh, at the default --prefix-cache-mb (an eighth of the
#      machine's memory); UMA_AGENT_EXTRA="--prefix-cache-mb 512" makes the working set larger
#      than one agent's prefix memory, a third of it within each's.
# uma-bench reports the rounds after the first apart (its JSON's last run): the first opens every
# conversation, and its requests wait for a prefix nobody holds yet under any policy.
# On a multi-GPU machine: UMA_AGENT_GPUS="0 1 2 3" UMA_CLUSTER_AGENTS=4 (and a larger model, prefix
# and request count: the cold first request of each group must be well under 10% of the run).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
# shellcheck source=bench/lib.sh
source bench/lib.sh
out=${1:-${UMA_BUILD:-build}/bench-cluster}
agents=${UMA_CLUSTER_AGENTS:-3}
groups=${UMA_CLUSTER_GROUPS:-4}
users=${UMA_CLUSTER_USERS:-3}
prefix=${UMA_CLUSTER_PREFIX:-1000}
requests=${UMA_CLUSTER_REQUESTS:-36}
conc=${UMA_CLUSTER_CONC:-3}
policies=${UMA_CLUSTER_POLICIES:-predicted round-robin least-loaded seed}
suffix=${UMA_CLUSTER_SUFFIX:-30}
output=${UMA_CLUSTER_OUTPUT:-16}
overhead_part=${UMA_CLUSTER_OVERHEAD:-1}
overhead_n=${UMA_CLUSTER_OVERHEAD_N:-200}
mkdir -p "$out"
bench_setup
cmake --build "$ubuild" -j "$(nproc)" --target uma-gw >/dev/null
export UMA_MODEL=$model UMA_CLUSTER_DIR=$out/cluster UMA_BUILD=$ubuild
export UMA_AGENT_FLAGS="--threads ${UMA_AGENT_THREADS:-1} --n-ctx $ctx --max-sessions ${UMA_CLUSTER_SESSIONS:-16} ${UMA_AGENT_EXTRA:-}"
trap 'scripts/cluster.sh down' EXIT

for policy in $policies; do
  log "policy $policy: $agents agents, $groups groups x $users users, prefix $prefix tokens, $requests requests, c=$conc"
  url=$(UMA_GW_FLAGS="--policy $policy --debug ${UMA_CLUSTER_GW_EXTRA:-}" scripts/cluster.sh up "$agents" | tail -1)
  "$ubuild"/bin/uma-bench --target "$url" --json --workload groups --groups "$groups" --users "$users" -c "$conc" \
    -n "$requests" --prefix-tokens "$prefix" --suffix-tokens "$suffix" --output-tokens "$output" --warmup 0 --seed 5 \
    >"$out/$policy.json"
  cp "$out/cluster/gw.log" "$out/$policy-gw.log"
  curl -s "$url/metrics" >"$out/$policy-gw.metrics"
  for i in $(seq "$agents"); do curl -s "http://127.0.0.1:$(cat "$out/cluster/agent$i.port")/metrics" >"$out/$policy-agent$i.metrics"; done
  scripts/cluster.sh down
done

if [ "$overhead_part" = 1 ]; then
log "gateway overhead and decision time: 1 agent (+63 registered)"
url=$(scripts/cluster.sh up 1 | tail -1)
agent="http://127.0.0.1:$(cat "$out/cluster/agent1.port")"
ghosts() {  # registers 63 more agents (the real one's address and stream) until killed
  exec python3 - "$(cat "$out/cluster/redis.address")" <<'PY'  # exec: $! is the script, which kill ends
import json, socket, sys, time
host, port = sys.argv[1].split(":")
def cmd(s, *args):
    s.sendall(("*%d\r\n" % len(args) + "".join("$%d\r\n%s\r\n" % (len(a.encode()), a) for a in args)).encode())
    return s.recv(1 << 20)
s = socket.create_connection((host, int(port)))
real = cmd(s, "SMEMBERS", "uma:agents").decode().split("\r\n")[2]
state = cmd(s, "GET", "uma:agent:" + real).decode().split("\r\n", 1)[1].rsplit("\r\n", 1)[0]
while True:
    for k in range(63):
        j = json.loads(state); j["id"] = "ghost%d" % k; j["ts_ms"] = int(time.time() * 1000)
        cmd(s, "SET", "uma:agent:ghost%d" % k, json.dumps(j), "PX", "3000"); cmd(s, "SADD", "uma:agents", "ghost%d" % k)
    time.sleep(0.5)
PY
}
overhead() {  # $1 = name, $2 = target
  "$ubuild"/bin/uma-bench --target "$2" --json --workload random -c 1 -n "$overhead_n" --prompt-tokens 8 --output-tokens 2 --warmup 5 \
    --seed "$3" >"$out/overhead-$1-$3.json"
}
for round in 1 2 3 4; do overhead direct "$agent" "$round"; overhead gateway "$url" "$round"; done
ghosts & gpid=$!
python3 -c "
import json,time,urllib.request
for _ in range(300):
    if json.load(urllib.request.urlopen('$url/health')).get('live') == 64: break
    time.sleep(0.1)
else: raise SystemExit('64 agents never live')"
curl -s "$url/metrics" >"$out/route64-before.metrics"
overhead gateway64 "$url" 1
curl -s "$url/metrics" >"$out/route64.metrics"
kill $gpid
scripts/cluster.sh down
fi
trap - EXIT

python3 - "$out" "$policies" "$overhead_part" <<'PY'
import json, re, sys
out, policies, overhead_part = sys.argv[1], sys.argv[2].split(), sys.argv[3] == "1"
def prom(path, name):
    m = re.search(r"^%s (\S+)$" % re.escape(name), open(path).read(), re.M)
    return float(m.group(1)) if m else float("nan")
def buckets(path, name):
    b = {}
    for m in re.finditer(r'^%s_bucket\{le="([^"]+)"\} (\S+)$' % re.escape(name), open(path).read(), re.M):
        b[float("inf") if m.group(1) == "+Inf" else float(m.group(1))] = float(m.group(2))
    return b
def p99_bound(after, before=None):
    a = buckets(after, "uma_gw_route_decision_us"); b = buckets(before, "uma_gw_route_decision_us") if before else {}
    d = {k: a[k] - b.get(k, 0) for k in a}; n = d[float("inf")]
    return next(k for k in sorted(d) if d[k] >= 0.99 * n), n
print(f"{'policy':13} {'TTFT p50 ms':>11} {'p90':>8} {'out tok/s':>9} {'p90 / rr':>8} {'pred err med':>12} {'prefix hit tok':>14}"
      f" | after the first round: {'p50':>6} {'p90':>6} {'p90 / rr':>8}")
def runs(p): return json.load(open(f"{out}/{p}.json"))["runs"]
rr = runs("round-robin")[0]["ttft_ms"]["p90"] if "round-robin" in policies else float("nan")
rr_later = runs("round-robin")[-1]["ttft_ms"]["p90"] if "round-robin" in policies else float("nan")
for p in policies:
    r, later = runs(p)[0], runs(p)[-1]
    hits = 0
    i = 1
    while True:
        try: hits += prom(f"{out}/{p}-agent{i}.metrics", "uma_prefix_cache_hit_tokens_total")
        except FileNotFoundError: break
        i += 1
    err = prom(f"{out}/{p}-gw.metrics", "uma_gw_ttft_prediction_error_median")
    print(f"{p:13} {r['ttft_ms']['p50']:11.0f} {r['ttft_ms']['p90']:8.0f} {r['output_tok_s']:9.1f} {r['ttft_ms']['p90'] / rr if rr else float('nan'):8.2f} {err:12.2f} {hits:14.0f}"
          f" | {'':22} {later['ttft_ms']['p50']:6.0f} {later['ttft_ms']['p90']:6.0f} {later['ttft_ms']['p90'] / rr_later if rr_later else float('nan'):8.2f}")
if not overhead_part: raise SystemExit(0)
for name in ("direct", "gateway"):
    for rnd in (1, 2, 3, 4):
        t = json.load(open(f"{out}/overhead-{name}-{rnd}.json"))["runs"][0]["ttft_ms"]
        print(f"overhead {name:8} round {rnd}: TTFT p50 {t['p50']:.2f} ms, p99 {t['p99']:.2f} ms")
d = [json.load(open(f"{out}/overhead-direct-{r}.json"))["runs"][0]["ttft_ms"] for r in (1, 2, 3, 4)]
g = [json.load(open(f"{out}/overhead-gateway-{r}.json"))["runs"][0]["ttft_ms"] for r in (1, 2, 3, 4)]
print("TTFT through the gateway - straight to the agent (end to end, interleaved rounds): p50 %.2f ms, p99 %.2f ms (mean of 4)" %
      (sum(x["p50"] - y["p50"] for x, y in zip(g, d)) / 4, sum(x["p99"] - y["p99"] for x, y in zip(g, d)) / 4))
def bound_of(path, name, q, before=None):
    a = buckets(path, name); b = buckets(before, name) if before else {}
    d = {k: a[k] - b.get(k, 0) for k in a}; n = d[float("inf")]
    return next(k for k in sorted(d) if d[k] >= q * n), n
for q in (0.5, 0.99):
    bnd, n = bound_of(f"{out}/route64-before.metrics", "uma_gw_added_us", q)
    print(f"gateway's own time before the agent starts (request whole -> sent, connect included): p{q*100:g} <= {bnd:g} us ({n:.0f} requests)")
bound, n = p99_bound(f"{out}/route64.metrics", f"{out}/route64-before.metrics")
print(f"routing decision with 64 live agents: p99 <= {bound:g} us (histogram bucket bound, {n:.0f} decisions)")
PY
