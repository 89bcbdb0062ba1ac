#!/usr/bin/env bash
# One command: does a large max_tokens cost anything when the reply stops
# early? The oracle model, n_ctx 8192, --max-tokens 4096 (a cap), 16 concurrent HTTP requests that
# each stop on a stop string after 72 tokens, asking for max_tokens 80, 1024 and 4000: the same
# work each time, so the wall times should match. Also records the most requests seen decoding at
# once (the uma_num_requests{state="decode"} gauge, polled).
#   bench/admission.sh [OUT_DIR]      (default build/bench-admission)
# Env: UMA_BENCH_THREADS (2), UMA_BENCH_PORT (18080), UMA_BENCH_REPS (5).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
# shellcheck source=bench/lib.sh
source bench/lib.sh
out=${1:-build/bench-admission}
reps=${UMA_BENCH_REPS:-5}
mkdir -p "$out"
bench_setup
oracle=build/models/oracle.gguf
[ -s "$oracle" ] || build/bin/uma-mkmodel --preset oracle --type f32 --seed 1 -o "$oracle" >/dev/null

log "umad: oracle, --threads $threads --n-ctx 8192 --max-sessions 16 --max-tokens 4096"
build/bin/umad --model "$oracle" --socket "$out/umad.sock" --threads "$threads" --n-ctx 8192 --max-sessions 16 \
  --max-tokens 4096 --http "127.0.0.1:$port" 2>"$out/umad.log" &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
wait_ready "python3 -c 'import urllib.request,sys; sys.exit(urllib.request.urlopen(\"http://127.0.0.1:$port/health\").status != 200)'"

python3 - "$port" "$reps" "$out" <<'PY'
import http.client, json, statistics, sys, threading, time

port, reps, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]

def post(body):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    c.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, data

def stream_pieces(prompt, n):
    """Each SSE chunk of the oracle carries one token's text."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    c.request("POST", "/v1/completions", json.dumps({"prompt": prompt, "max_tokens": n, "stream": True}),
              {"Content-Type": "application/json"})
    r = c.getresponse()
    pieces = []
    for line in r.read().decode().split("\n"):
        if line.startswith("data: ") and line != "data: [DONE]":
            t = json.loads(line[6:])["choices"][0]["text"]
            if t:
                pieces.append(t)
    c.close()
    return pieces

# The stop string: the text of the 73rd token, so each reply stops after 72 tokens.
prompts = ["hello world %d" % k for k in range(16)]
stops = []
for p in prompts:
    pieces = stream_pieces(p, 80)
    stop = pieces[72]
    assert stop not in "".join(pieces[:72]), "stop string appears early"
    stops.append(stop)

def decode_gauge():
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    c.close()
    for line in text.split("\n"):
        if line.startswith('uma_num_requests{state="decode"}'):
            return int(float(line.split()[-1]))
    return 0

def run(max_tokens):
    results = [None] * 16
    def one(k):
        status, data = post({"prompt": prompts[k], "max_tokens": max_tokens, "stop": [stops[k]], "temperature": 0})
        results[k] = (status, json.loads(data))
    peak = [0]
    done = threading.Event()
    def poll():
        while not done.is_set():
            peak[0] = max(peak[0], decode_gauge())
            time.sleep(0.002)
    poller = threading.Thread(target=poll)
    poller.start()
    threads = [threading.Thread(target=one, args=(k,)) for k in range(16)]
    t0 = time.monotonic()
    for t in threads: t.start()
    for t in threads: t.join()
    wall = time.monotonic() - t0
    done.set()
    poller.join()
    for status, body in results:
        assert status == 200, body
        assert body["choices"][0]["finish_reason"] == "stop", body
        assert body["usage"]["completion_tokens"] == 73, body["usage"]  # the stop string's token counts
    return wall, peak[0]

rows = {}
for mt in (80, 1024, 4000):
    run(mt)  # warm-up
    walls, peaks = [], []
    for _ in range(reps):
        w, p = run(mt)
        walls.append(w)
        peaks.append(p)
    rows[mt] = {"wall_s_median": statistics.median(walls), "wall_s": walls, "peak_decoding": max(peaks)}
base = rows[80]["wall_s_median"]
print("| max_tokens | wall time (median of %d) | vs 80 | most decoding at once |" % reps)
print("|---|---|---|---|")
for mt, r in rows.items():
    print("| %d | %.3f s | %.2fx | %d |" % (mt, r["wall_s_median"], r["wall_s_median"] / base, r["peak_decoding"]))
json.dump(rows, open(out + "/admission.json", "w"), indent=1)
PY
kill -TERM $pid; wait $pid || true; trap - EXIT
