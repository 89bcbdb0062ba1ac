#!/usr/bin/env bash
# Memory against llama-server at the same sessions x room (umad --max-sessions S --n-ctx S*room,
# llama-server -np S -c S*room; umad's prefix cache on, as by default): start-to-ready, RSS (and GPU
# memory where nvidia-smi is) after one request, KV cells allocated, for 1, 4 and 16 sessions and
# rooms of 4096 and 32768. Then 16 users sharing one 3000-token system prompt (16 sessions x 4096):
# TTFT p50 against llama-server's, RSS, the KV cells held at the peak (bench/metrics_peak.py) against
# the prompt held once, and the KV tokens held after, for umad in both KV layouts, and unified KV
# with a context of the group held once plus 10% (sixteen sessions in one room).
# Both servers over HTTP, same model file and threads, one run.
#   bench/memory.sh [OUT_DIR]      (default build/bench-memory)
# The model says a trained context of 32768 (uma-mkmodel --context-length): llama-server caps a
# slot's context to the trained one, and the rooms compared must be the same.
# Env: bench/lib.sh's; UMA_MEMORY_MODEL ("small q8_0": uma-mkmodel's preset and type),
#      UMA_MEMORY_SESSIONS ("1 4 16"), UMA_MEMORY_ROOMS ("4096 32768"), UMA_MEMORY_PREFIX (3000: the
#      group's shared prompt, tokens), UMA_MEMORY_GROUP (1; 0: the rows only). UMA_GPU=cuda UMA_BUILD=build-cuda: the GPU build, every
#      layer on the GPU.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
# shellcheck source=bench/lib.sh
source bench/lib.sh
out=${1:-build/bench-memory}
sessions=(${UMA_MEMORY_SESSIONS:-1 4 16})
rooms=(${UMA_MEMORY_ROOMS:-4096 32768})
prefix=${UMA_MEMORY_PREFIX:-3000}
mkdir -p "$out"
bench_setup llama-server
read -r preset qtype <<<"${UMA_MEMORY_MODEL:-small q8_0}"
model=$ubuild/models/$preset-$qtype-ctx32k.gguf
[ -s "$model" ] || "$ubuild"/bin/uma-mkmodel --preset "$preset" --type "$qtype" --seed 1 --context-length 32768 \
  -o "$model" >/dev/null
rows="$out/rows.jsonl"
: >"$rows"

ngl=()
[ -n "${UMA_GPU:-}" ] && ngl=(-ngl 999)
llama_cmd() {  # $1 sessions, $2 context
  echo "$L/llama-server -m $model -t $threads -c $2 -np $1 ${ngl[*]} --host 127.0.0.1 --port $port --no-webui"
}
umad_cmd() {  # $1 sessions, $2 context, then extra flags
  local s=$1 c=$2; shift 2
  echo "$ubuild/bin/umad --model $model --socket $out/umad.sock --http 127.0.0.1:$port --threads $threads" \
       "--n-ctx $c --max-sessions $s $*"
}
probe() {  # $1 name, then the command; appends a row tagged with sessions and room
  local name=$1; shift
  python3 bench/memory_probe.py "$name" "$port" "$out/$name.log" -- "$@" |
    python3 -c "import json,sys; r=json.loads(sys.stdin.read()); r.update(sessions=$s, room=$room); print(json.dumps(r))" >>"$rows"
}

for s in "${sessions[@]}"; do
  for room in "${rooms[@]}"; do
    ctx=$((s * room))
    log "sessions $s x room $room (context $ctx)"
    # shellcheck disable=SC2046
    probe "llama-server-s$s-r$room" $(llama_cmd "$s" "$ctx")
    # shellcheck disable=SC2046
    probe "umad-s$s-r$room" $(umad_cmd "$s" "$ctx")
  done
done

rm -f "$out/group.jsonl"
if [ "${UMA_MEMORY_GROUP:-1}" != 0 ]; then
log "16 users, one ${prefix}-token system prompt (16 sessions x 4096)"
group() {  # $1 name, then the command
  local name=$1; shift
  local pid
  pid=$(python3 bench/memory_probe.py --keep "$name" "$port" "$out/$name.log" -- "$@" | python3 -c "import json,sys; print(json.load(sys.stdin)['pid'])")
  python3 bench/metrics_peak.py "$port" >"$out/$name.peak.json" &
  local sampler=$!
  "$ubuild"/bin/uma-bench --target "http://127.0.0.1:$port" --json --workload shared-prefix -c 16 -n 16 --seed 11 \
    --prefix-tokens "$prefix" --suffix-tokens 30 --output-tokens 16 --warmup 1 >"$out/$name.json"
  kill -TERM "$sampler"; wait "$sampler"
  python3 - "$name" "$pid" "$port" "$out/$name.json" "$out/$name.peak.json" >>"$out/group.jsonl" <<'PY'
import json, re, sys, urllib.request
name, pid, port, path = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
peak = json.load(open(sys.argv[5]))["kv_cells_held_peak"]
run = json.load(open(path))["runs"][0]
rss = next(int(l.split()[1]) for l in open(f"/proc/{pid}/status") if l.startswith("VmRSS:")) / 1024
tokens = None
try:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    m = re.search(r"^uma_kv_cache_tokens_used (\d+)", text, re.M)
    tokens = int(m.group(1)) if m else None
except OSError:
    pass
sys.path.insert(0, "bench")
from memory_probe import gpu_mib
print(json.dumps({"name": name, "ttft_p50_ms": run["ttft_ms"]["p50"], "ttft_p90_ms": run["ttft_ms"]["p90"],
                  "output_tok_s": run["output_tok_s"], "rss_mib": round(rss, 1), "gpu_mib": gpu_mib(int(pid)),
                  "kv_tokens_held": tokens, "kv_cells_held_peak": peak}))
PY
  kill -TERM "$pid"
  while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
}
: >"$out/group.jsonl"
# shellcheck disable=SC2046
group llama-server-group $(llama_cmd 16 65536)
# shellcheck disable=SC2046
group umad-group $(umad_cmd 16 65536)
# shellcheck disable=SC2046
group umad-unified-group $(umad_cmd 16 65536 --kv-layout unified)
# Unified KV sized to the group held once (+10%): the 16 sessions share 4096 cells, not 16 x 4096.
fit=$(( (prefix + 16 * (30 + 16)) * 11 / 10 ))
# shellcheck disable=SC2046
group "umad-unified-$fit" $(umad_cmd 16 "$fit" --kv-layout unified)
fi

python3 - "$out" "$prefix" <<'PY' | tee "$out/report.md"
import json, sys
out = sys.argv[1]
rows = [json.loads(l) for l in open(f"{out}/rows.jsonl")]
by = {}
for r in rows:
    by.setdefault((r["sessions"], r["room"]), {})["llama" if r["name"].startswith("llama") else "umad"] = r
print("| sessions x room | server | ready s | RSS MiB | GPU MiB | KV cells | RSS / llama-server | ready / llama-server |")
print("|---|---|---|---|---|---|---|---|")
for (s, room), pair in sorted(by.items()):
    ref = pair.get("llama")
    for who in ("llama", "umad"):
        r = pair.get(who)
        if r is None:
            continue
        ratio = lambda k: f"{r[k] / ref[k]:.2f}" if ref and ref.get(k) else "-"
        print(f"| {s} x {room} | {'llama-server' if who == 'llama' else 'umad'} | {r['ready_s']:.2f} | {r['rss_mib']:.0f} | "
              f"{r['gpu_mib'] if r['gpu_mib'] is not None else '-'} | {r['kv_cells']} | {ratio('rss_mib')} | {ratio('ready_s')} |")
try:
    groups = [json.loads(l) for l in open(f"{out}/group.jsonl")]
except FileNotFoundError:
    sys.exit(0)
ref = next(g for g in groups if g["name"].startswith("llama"))
print()
# What the group needs held once: the prompt, and each user's suffix and output (tokens as uma-bench
# sends them; a chat template would add a few).
prefix = int(sys.argv[2])
once = prefix + 16 * (30 + 16)
print(f"KV cells the group needs with its prompt held once: {prefix} + 16 x (30 + 16) = {once}")
print()
print("| 16 users, one system prompt | TTFT p50 ms | p90 | out tok/s | RSS MiB | GPU MiB | KV cells held, peak | held / once | KV tokens after | TTFT p50 / llama-server |")
print("|---|---|---|---|---|---|---|---|---|---|")
# llama-server's TTFT is 0 when none of its requests finished (the client gave up): no ratio then.
ratio = lambda g: f"{g['ttft_p50_ms'] / ref['ttft_p50_ms']:.2f}" if ref["ttft_p50_ms"] > 0 else "-"
for g in groups:
    held = g.get("kv_cells_held_peak")
    print(f"| {g['name']} | {g['ttft_p50_ms']:.0f} | {g['ttft_p90_ms']:.0f} | {g['output_tok_s']:.1f} | {g['rss_mib']:.0f} | "
          f"{g.get('gpu_mib') if g.get('gpu_mib') is not None else '-'} | "
          f"{held if held is not None else '-'} | {f'{held / once:.2f}' if held is not None else '-'} | "
          f"{g['kv_tokens_held'] if g['kv_tokens_held'] is not None else '-'} | {ratio(g)} |")
PY
