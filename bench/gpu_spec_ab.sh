#!/usr/bin/env bash
# Alternating A/B of umad configurations on bench/gpu_spec.sh's target, one command:
#   bench/gpu_spec_ab.sh [OUT_DIR]      (default build-cuda/bench-gpu-spec-ab)
# Two runs of one server differ by 1-3% on a GPU (docs/BENCHMARKS.md "On a GPU": two off runs
# 1836 / 1829 tok/s at c=16), so a one-pair row of gpu_spec.sh cannot tell a
# 0.97 from a 1.00. This starts the servers in turn, A B A B ..., each running the same rows, and
# prints every run's tok/s; compare the means.
# Env: UMA_AB_MODES ("off lookup off lookup off lookup"; each is off, lookup, dm0 = lookup with
#      --draft-max 0 (speculation's buffers, no drafts), or NAME=FLAGS with the flags comma-separated),
#      UMA_AB_ROWS ("fresh 16 1 128;fresh 64 1 128": bench/spec_rows.sh rows), UMA_BENCH_PORT (18080).
# Each umad inherits the environment (UMA_DEBUG=1 logs its ticks; UMA_SPEC_UNIFORM_BELOW and other
# knobs apply to all).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
export UMA_GPU=${UMA_GPU:-cuda}
bdir=build-$UMA_GPU
out=${1:-$bdir/bench-gpu-spec-ab}
port=${UMA_BENCH_PORT:-18080}
url=http://127.0.0.1:$port
ctx=65536
mkdir -p "$out" "$bdir/models"
scripts/setup.sh >/dev/null
cmake -S . -B "$bdir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$bdir" -j "$(nproc)" --target umad uma-mkmodel uma-cli >/dev/null
target=$bdir/models/8b-oracle-q4_0.gguf
[ -s "$target" ] || "$bdir/bin/uma-mkmodel" --preset 8b --oracle --type q4_0 --seed 1 -o "$target" >/dev/null
read -r -a modes <<<"${UMA_AB_MODES:-off lookup off lookup off lookup}"
IFS=';' read -r -a rows <<<"${UMA_AB_ROWS:-fresh 16 1 128;fresh 64 1 128}"
pid=
. bench/spec_rows.sh
trap spec_server_stop EXIT
: >"$out/rows.txt"
i=0
for mode in "${modes[@]}"; do
  i=$((i + 1))
  case $mode in
    off) name=off flags=(--speculative off) ;;
    lookup) name=lookup flags=(--speculative lookup) ;;
    dm0) name=dm0 flags=(--speculative lookup --draft-max 0) ;;
    *=*) name=${mode%%=*}; IFS=',' read -r -a flags <<<"${mode#*=}" ;;
    *) echo "unknown mode $mode" >&2; exit 2 ;;
  esac
  "$bdir/bin/umad" --model "$target" --socket "$out/umad.sock" --n-ctx "$ctx" --max-sessions 64 --http "127.0.0.1:$port" \
    "${flags[@]}" 2>"$out/umad-$i-$name.log" &
  pid=$!
  spec_server_ready
  spec_rows "umad-$i-$name" "${rows[@]}"
  spec_server_stop
  pid=
done
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null || echo unknown)"
python3 - "$out/rows.txt" <<'PY'
import json, sys, collections
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    label, workload, c, js = line.split(" ", 3)
    runs[(label.split("-", 2)[2], workload, c)].append(json.loads(js)["tok_s"])
for (name, workload, c), v in sorted(runs.items(), key=lambda kv: (kv[0][1], kv[0][2], kv[0][0])):
    print(f"{workload:6} {c:5} {name:10} mean {sum(v) / len(v):8.1f} tok/s  runs {' '.join(f'{x:.1f}' for x in v)}")
PY
