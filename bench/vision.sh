#!/usr/bin/env bash
# Images: umad --mmproj against llama-server --mmproj on the same model and projector files,
# threads and slots: image chats one at a time (each a new image), one conversation's later turns
# (its image sent again each turn, as chat clients do), and concurrent clients; start-to-ready and
# memory (RSS after one request and at the end, VmHWM) of each server.
#   bench/vision.sh [OUT_DIR]      (default build/bench-results/vision)
# Env: as bench/lib.sh (the model: the small preset at Q8_0); UMA_VISION_SHAPE (the projector's ViT,
#      vit-b: 196 embeddings an image), UMA_VISION_COLD (4), UMA_VISION_TURNS (4),
#      UMA_VISION_CLIENTS (4), UMA_VISION_EACH (2).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
source bench/lib.sh
out=${1:-build/bench-results/vision}
mkdir -p "$out"
shape=${UMA_VISION_SHAPE:-vit-b}
cold=${UMA_VISION_COLD:-4}
turns=${UMA_VISION_TURNS:-4}
clients=${UMA_VISION_CLIENTS:-4}
each=${UMA_VISION_EACH:-2}
slots=4
vctx=$((slots * 2048))
bench_setup llama-server
mmproj=$ubuild/models/$(basename "$model" .gguf)-mmproj-$shape.gguf
if [ ! -s "$mmproj" ]; then
  "$ubuild"/bin/uma-mkmodel --preset "${UMA_BENCH_PRESET:-small}" --seed 1 --mmproj "$mmproj" --mmproj-shape "$shape" >/dev/null
fi
url=http://127.0.0.1:$port

run_server() {  # NAME COMMAND...: start, probe, the three workloads, stop
  local name=$1; shift
  log "$name: $*"
  python3 bench/memory_probe.py "$name" "$port" "$out/$name.log" --keep -- "$@" >"$out/$name-start.json"
  local spid; spid=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['pid'])" "$out/$name-start.json")
  trap "kill $spid 2>/dev/null || true" EXIT
  python3 bench/vision_client.py "$url" cold 1 99 >/dev/null  # warm: the projector's first graph (an image not used again)
  python3 bench/vision_client.py "$url" cold "$cold" | tee "$out/$name-cold.json"
  python3 bench/vision_client.py "$url" turns "$turns" | tee "$out/$name-turns.json"
  python3 bench/vision_client.py "$url" concurrent "$clients" "$each" | tee "$out/$name-concurrent.json"
  python3 - "$spid" "$out/$name-end.json" <<'PY'
import json, sys
kib = {l.split(":")[0]: int(l.split()[1]) for l in open(f"/proc/{sys.argv[1]}/status") if l.startswith(("VmRSS", "VmHWM"))}
json.dump({"rss_mib": round(kib["VmRSS"] / 1024, 1), "hwm_mib": round(kib["VmHWM"] / 1024, 1)}, open(sys.argv[2], "w"))
PY
  kill -TERM "$spid"; while kill -0 "$spid" 2>/dev/null; do sleep 0.1; done
  trap - EXIT
}

run_server umad "$ubuild"/bin/umad --model "$model" --mmproj "$mmproj" --socket "$out/umad.sock" \
  --http "127.0.0.1:$port" --threads "$threads" --n-ctx "$vctx" --max-sessions "$slots"
run_server llama-server "$L/llama-server" -m "$model" --mmproj "$mmproj" -t "$threads" -c "$vctx" -np "$slots" \
  --host 127.0.0.1 --port "$port" --no-webui

python3 - "$out" "$shape" <<'PY'
import json, sys, pathlib
d, shape = pathlib.Path(sys.argv[1]), sys.argv[2]
r = {n: {k: json.loads((d / f"{n}-{k}.json").read_text()) for k in ("start", "cold", "turns", "concurrent", "end")}
     for n in ("umad", "llama-server")}
u, l = r["umad"], r["llama-server"]
def row(what, a, b, unit, better="lower"):
    ratio = a / b if b else float("nan")
    print(f"| {what} | {a} {unit} | {b} {unit} | {ratio:.2f} |")
print(f"Projector {shape}; 640x480 PNG images.\n")
print("| | umad | llama-server | umad / llama-server |\n|---|---|---|---|")
row("start to ready", u["start"]["ready_s"], l["start"]["ready_s"], "s")
row("RSS after one request", u["start"]["rss_mib"], l["start"]["rss_mib"], "MiB")
print(f'| RSS at the end (peak) | {u["end"]["rss_mib"]} ({u["end"]["hwm_mib"]}) MiB | {l["end"]["rss_mib"]} ({l["end"]["hwm_mib"]}) MiB | {u["end"]["hwm_mib"] / l["end"]["hwm_mib"]:.2f} (peak) |')
row("a new image: TTFT p50", u["cold"]["ttft_p50_ms"], l["cold"]["ttft_p50_ms"], "ms")
row("later turns of a chat about one image: TTFT p50", u["turns"]["later_turns_ttft_p50_ms"], l["turns"]["later_turns_ttft_p50_ms"], "ms")
c = u["concurrent"]["clients"]
row(f"{c} clients, new images: requests/s", u["concurrent"]["requests_per_s"], l["concurrent"]["requests_per_s"], "")
row(f"{c} clients: TTFT p50", u["concurrent"]["ttft_p50_ms"], l["concurrent"]["ttft_p50_ms"], "ms")
print(f'\nturns TTFT ms: umad {u["turns"]["ttft_ms"]} (cached tokens {u["turns"]["cached_tokens"]}), '
      f'llama-server {l["turns"]["ttft_ms"]} (cached tokens {l["turns"]["cached_tokens"]})')
PY
