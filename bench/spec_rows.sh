# Sourced by bench/spec.sh and bench/gpu_spec.sh: spec_rows LABEL ROW... runs bench/spec_client.py
# against $url for each "WORKLOAD STREAMS REQUESTS TOKENS" row (after a warm-up with other
# prompts) and appends "LABEL WORKLOAD c=STREAMS JSON" to $out/rows.txt. $spec_first (0) numbers the
# first request: a later round gives other prompts, so that no server answers from its cache.
# spec_server_ready waits until the server at $url answers /health (or $pid has exited);
# spec_server_stop ends $pid (bench/gpu_spec.sh, bench/gpu_spec_ab.sh: one server at a time).
spec_rows() {
  local label=$1; shift
  for w in "$@"; do
    set -- "$label" $w
    python3 bench/spec_client.py "$url" "$2" "$3" 1 16 100 >/dev/null  # warm-up (graphs, cost model), other prompts
    local r; r=$(python3 bench/spec_client.py "$url" "$2" "$3" "$4" "$5" "${spec_first:-0}")
    echo "$1 $2 c=$3 $r" | tee -a "$out/rows.txt"
  done
}
spec_server_ready() {
  for _ in $(seq 1800); do
    python3 -c "import urllib.request,sys; sys.exit(urllib.request.urlopen('$url/health').status != 200)" >/dev/null 2>&1 && return 0
    kill -0 "$pid" 2>/dev/null || { echo "server exited" >&2; return 1; }
    sleep 0.1
  done
  echo "server did not come up" >&2; return 1
}
spec_server_stop() { [ -z "${pid:-}" ] || { kill -TERM "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; }; }
