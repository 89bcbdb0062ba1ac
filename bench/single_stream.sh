#!/usr/bin/env bash
# Single-stream decode speed: umad against llama-bench tg, same model file, same threads, same run.
#   bench/single_stream.sh [threads] [tokens] [repeats]
# Prints llama-bench's tg t/s, umad's decode t/s (first token to last, over the socket, through the
# whole serving path, framed JSON protocol), and their ratio. Needs a build (scripts/demo.sh or scripts/test.sh).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
threads=${1:-2}
n=${2:-128}
reps=${3:-5}
scripts/setup.sh llama-bench >/dev/null
llama_bin=$(scripts/llama.sh --print-root)/build/bin
model=${UMA_MODEL:-build/models/small-q8_0.gguf}
[ -s "$model" ] || build/bin/uma-mkmodel --preset small --type q8_0 --seed 1 -o "$model" >/dev/null

tg=$("$llama_bin/llama-bench" -m "$model" -t "$threads" -p 0 -n "$n" -r "$reps" -o json 2>/dev/null |
     python3 -c 'import json,sys; print(round(json.load(sys.stdin)[0]["avg_ts"], 1))')

sock=$(mktemp -u /tmp/uma-bench-XXXXXX.sock)
build/bin/umad --model "$model" --socket "$sock" --threads "$threads" --max-tokens "$n" 2>/dev/null &
pid=$!
trap 'kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null' EXIT
for _ in $(seq 600); do build/bin/uma-cli -s "$sock" metrics >/dev/null 2>&1 && break; sleep 0.1; done

uma=$(python3 - "$sock" "$n" "$reps" <<'PY'
import json, socket, struct, sys, time
path, n, reps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def frames(s):
    buf = b""
    while True:
        while len(buf) >= 4 and len(buf) >= 4 + struct.unpack("<I", buf[:4])[0]:
            k = struct.unpack("<I", buf[:4])[0]
            yield json.loads(buf[4:4 + k]); buf = buf[4 + k:]
        chunk = s.recv(65536)
        if not chunk: return
        buf += chunk
def send(s, obj):
    b = json.dumps(obj).encode(); s.sendall(struct.pack("<I", len(b)) + b)
rates = []
for r in range(reps + 1):  # the first run warms up
    s = socket.socket(socket.AF_UNIX); s.connect(path)
    send(s, {"id": str(r), "prompt": "The quick brown fox jumps over the lazy dog", "max_tokens": n})
    first = last = None
    for ev in frames(s):
        if ev["event"] == "token":
            last = time.perf_counter()
            if first is None: first = last
        else:
            tokens = ev["usage"]["completion_tokens"]; break
    s.close()
    if r > 0 and tokens > 1: rates.append((tokens - 1) / (last - first))
print(round(sum(rates) / len(rates), 1))
PY
)
echo "model $model, threads $threads, $n tokens, $reps runs"
echo "llama-bench tg$n: $tg t/s"
echo "umad single stream: $uma t/s"
python3 -c "print('ratio umad / llama-bench: %.3f' % ($uma / $tg))"
