# Shared by bench/*.sh (sourced): settings, build, the model file, starting and stopping servers.
# Env: UMA_BENCH_THREADS (2), UMA_BENCH_CTX (40960), UMA_BENCH_MODEL (UMA_BENCH_PRESET's, small, at Q8_0),
#      UMA_BENCH_PORT (18080), UMA_BUILD (our build folder, build; UMA_GPU=cuda wants build-cuda).
threads=${UMA_BENCH_THREADS:-2}
ctx=${UMA_BENCH_CTX:-40960}  # per-sequence KV: 2560 cells for each of 16 sessions (the 2000-token prompts fit)
port=${UMA_BENCH_PORT:-18080}
ubuild=${UMA_BUILD:-build}
log() { printf '\n== %s\n' "$*" >&2; }

# Builds our binaries and the named llama.cpp tools (pinned source); sets L and model.
bench_setup() {
  scripts/setup.sh "$@" >/dev/null
  cmake -S . -B "$ubuild" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build "$ubuild" -j "$(nproc)" --target umad uma-bench uma-mkmodel uma-cli >/dev/null
  L=$(scripts/llama.sh --print-root)/build/bin
  local preset=${UMA_BENCH_PRESET:-small}
  model=${UMA_BENCH_MODEL:-$ubuild/models/$preset-q8_0.gguf}
  mkdir -p "$ubuild/models"
  [ -s "$model" ] || "$ubuild"/bin/uma-mkmodel --preset "$preset" --type q8_0 --seed 1 -o "$model" >/dev/null
}

wait_ready() {  # $1 = a command that succeeds once the server answers
  for _ in $(seq 600); do eval "$1" >/dev/null 2>&1 && return 0; sleep 0.1; done
  echo "server did not come up" >&2; return 1
}

# umad on $1 (socket), logging to $2, with extra flags after; sets pid.
start_umad() {
  local sock=$1 logfile=$2; shift 2
  log "umad: --threads $threads --n-ctx $ctx --max-sessions 16 $*"
  "$ubuild"/bin/umad --model "$model" --socket "$sock" --threads "$threads" --n-ctx "$ctx" --max-sessions 16 \
    --max-tokens 512 "$@" 2>"$logfile" &
  pid=$!
  trap 'kill $pid 2>/dev/null || true' EXIT
  wait_ready "$ubuild/bin/uma-cli -s $sock metrics"
}

# llama-server with the same model, threads and context, 16 slots over one unified KV; sets pid.
start_llama_server() {
  log "llama-server: -t $threads -c $ctx -np 16 --kv-unified"
  "$L/llama-server" -m "$model" -t "$threads" -c "$ctx" -np 16 -kvu --host 127.0.0.1 --port "$port" --no-webui \
    >"$1" 2>&1 &
  pid=$!
  trap 'kill $pid 2>/dev/null || true' EXIT
  wait_ready "python3 -c 'import urllib.request,sys; sys.exit(urllib.request.urlopen(\"http://127.0.0.1:$port/health\").status != 200)'"
}

stop_server() {
  kill -TERM "$pid"
  wait "$pid" || true
  trap - EXIT
}
