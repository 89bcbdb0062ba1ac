#!/usr/bin/env bash
# Model loading, per tier, against the hardware's limits and llama.cpp's own loader, in one run
# (docs/BENCHMARKS.md "Model loading"). Every timed load starts with a cold page cache
# (drop_caches) and ends with the first token computed (a context and one decode: every weight
# touched, so mmap's deferred reads are counted).
#   limits:  fio O_DIRECT sequential read of the model file (io_uring, 4 MiB, QD 8); a host memory
#            copy; the link (a veth into a network namespace shaped by tc tbf to UMA_LOAD_LINK_MBIT,
#            or, without netns, nginx's per-connection limit_rate); on a GPU, the pinned host->GPU copy
#   llama.cpp: --load-mode mmap | direct (LLAMA_LOAD_MODE_DIRECT_IO) on the same file
#   ours:    NVMe tier (io_uring O_DIRECT, verified), DRAM tier (an image already in host memory),
#            remote tier (HTTP Range through nginx over the link, written to the NVMe tier as it loads)
# Env: UMA_LOAD_PRESETS ("1b:q8_0"; add "8b:q4_0" where disk and time allow), UMA_LOAD_DIR
# (build/load-bench: the NVMe tier lives here; put it on the disk to measure), UMA_LOAD_LINK_MBIT
# (2000), UMA_LOAD_RUNS (3), UMA_LOAD_GPU_LAYERS (-1: all where there is a GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
presets=${UMA_LOAD_PRESETS:-1b:q8_0}
work=${UMA_LOAD_DIR:-$PWD/build/load-bench}
link_mbit=${UMA_LOAD_LINK_MBIT:-2000}
runs=${UMA_LOAD_RUNS:-3}
gpu_layers=${UMA_LOAD_GPU_LAYERS:--1}
bdir=build${UMA_GPU:+-$UMA_GPU}
log() { printf '== %s\n' "$*" >&2; }

scripts/setup.sh >/dev/null
cmake -S . -B "$bdir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$bdir" -j "$(nproc)" --target uma-load-bench uma-store uma-mkmodel >/dev/null
B=$bdir/bin
mkdir -p "$work/models" "$work/nvme" "$work/www"
out=$work/results.jsonl
: >"$out"

cold() { sync; echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || { log "cannot drop the page cache (not root?): loads are not cold"; }; }
median() { python3 -c 'import sys,statistics; v=[float(x) for x in sys.stdin.read().split()]; print(statistics.median(v) if v else "nan")'; }
# run LABEL CMD...: $runs cold runs, each JSON line tagged and kept
run() {
  local label=$1; shift
  for _ in $(seq "$runs"); do
    [ "${keep_cache:-0}" = 1 ] || cold
    "$@" --gpu-layers "$gpu_layers" | sed "s/^{/{\"label\":\"$label\",/" | tee -a "$out" >&2
  done
}

# The remote tier's link: nginx inside a network namespace behind a veth shaped to the link rate.
ns=ul$$
nginx_dir=$(mktemp -d)
cleanup() {
  [ -f "$nginx_dir/nginx.pid" ] && kill "$(cat "$nginx_dir/nginx.pid")" 2>/dev/null || true
  ip netns del "$ns" 2>/dev/null || true
  rm -rf "$nginx_dir"
}
trap cleanup EXIT
start_nginx() {  # $1 listen address, $2 limit_rate
  cat >"$nginx_dir/nginx.conf" <<CONF
daemon on; worker_processes 2; pid $nginx_dir/nginx.pid; error_log $nginx_dir/error.log;
events { worker_connections 256; }
http { access_log off; sendfile on; client_body_temp_path $nginx_dir; proxy_temp_path $nginx_dir;
  fastcgi_temp_path $nginx_dir; uwsgi_temp_path $nginx_dir; scgi_temp_path $nginx_dir;
  server { listen $1; root $work/www; location / { limit_rate $2; } } }
CONF
  ${netns_exec:-} /usr/sbin/nginx -c "$nginx_dir/nginx.conf" -p "$nginx_dir" -e "$nginx_dir/error.log"
}
have_nginx=1; [ -x /usr/sbin/nginx ] || { have_nginx=0; log "no nginx here: the remote tier is not measured"; }
if [ "$have_nginx" = 0 ]; then
  base=""; link_note="none (no nginx)"
elif command -v ip >/dev/null && ip netns add "$ns" 2>/dev/null && ip link add "$ns-h" type veth peer name "$ns-n" 2>/dev/null; then
  ip link set "$ns-n" netns "$ns"
  ip addr add 10.213.0.1/30 dev "$ns-h"; ip link set "$ns-h" up
  ip netns exec "$ns" ip addr add 10.213.0.2/30 dev "$ns-n"
  ip netns exec "$ns" ip link set "$ns-n" up; ip netns exec "$ns" ip link set lo up
  # the namespace's egress (nginx's replies) is the link; burst: 1 ms at the rate
  ip netns exec "$ns" tc qdisc add dev "$ns-n" root tbf rate "${link_mbit}mbit" burst "$((link_mbit * 1000 / 8))b" latency 100ms
  netns_exec="ip netns exec $ns"
  start_nginx 10.213.0.2:8089 0
  base=http://10.213.0.2:8089
  link_note="veth + tc tbf ${link_mbit} Mbit/s"
else
  conns=8
  start_nginx 127.0.0.1:18089 "$((link_mbit * 125000 / conns))"
  base=http://127.0.0.1:18089
  link_note="nginx limit_rate $((link_mbit / conns)) Mbit/s x $conns connections (no netns here)"
fi
log "remote tier link: $link_note"

for p in $presets; do
  preset=${p%%:*}; type=${p##*:}; id=$preset-$type
  f=$work/models/$id.gguf
  [ -s "$f" ] || { log "writing $id"; "$B/uma-mkmodel" --preset "$preset" --type "$type" --seed 1 -o "$f" >/dev/null; }
  [ -s "$f.idx" ] || "$B/uma-store" add "$f" --id "$id" --redis none >&2
  bytes=$(stat -c %s "$f")
  ln -f "$f" "$work/www/$id.gguf" 2>/dev/null || cp "$f" "$work/www/$id.gguf"
  nv=$work/nvme/$id.gguf
  [ -s "$nv" ] || cp "$f" "$nv"
  runs_saved=$runs; runs=1
  keep_cache=1 run "memcpy:$id" "$B/uma-load-bench" --mode memcpy --bytes "$bytes"
  "$B/uma-load-bench" --mode h2d --bytes "$bytes" 2>/dev/null | sed "s/^{/{\"label\":\"h2d:$id\",/" | tee -a "$out" >&2 || true
  # Rounds, each measuring everything once: the disk and the machine drift, so every figure's
  # median comes from the same stretch of time as its limit's.
  for _ in $(seq "$runs_saved"); do
    cold
    if command -v fio >/dev/null; then
      # The disk's O_DIRECT limit at our reader's request size and depth, and at a deeper queue of
      # larger requests; the better of the two is the limit.
      best=0
      for cfg in "4M 8" "8M 32"; do
        set -- $cfg
        fio --name=seq --filename="$nv" --readonly --rw=read --bs="$1" --iodepth="$2" --ioengine=io_uring --direct=1 \
            --size="$bytes" --output-format=json --output="$work/fio.json" >/dev/null
        bw=$(python3 -c "import json;print(json.load(open('$work/fio.json'))['jobs'][0]['read']['bw_bytes']/1e9)")
        best=$(python3 -c "print(max($best, $bw))")
      done
      echo "{\"label\":\"fio:$id\",\"gb_s\":$best}" | tee -a "$out" >&2
    else  # no fio (a bundle-built GPU server): dd's O_DIRECT read, one request at a time: a floor of the limit
      s=$(date +%s.%N); dd if="$nv" of=/dev/null bs=16M iflag=direct status=none; e=$(date +%s.%N)
      echo "{\"label\":\"fio:$id\",\"tool\":\"dd\",\"gb_s\":$(python3 -c "print($bytes/($e-$s)/1e9)")}" | tee -a "$out" >&2
    fi
    run "llama-mmap:$id" "$B/uma-load-bench" --mode llama --model "$nv" --load-mode mmap
    keep_cache=1 run "llama-mmap-warm:$id" "$B/uma-load-bench" --mode llama --model "$nv" --load-mode mmap
    run "llama-direct:$id" "$B/uma-load-bench" --mode llama --model "$nv" --load-mode direct
    run "nvme:$id" "$B/uma-load-bench" --mode store --tier nvme --idx "$f.idx" --dir "$work/nvme" --prefault
    run "nvme-fresh-memory:$id" "$B/uma-load-bench" --mode store --tier nvme --idx "$f.idx" --dir "$work/nvme"
    run "dram:$id" "$B/uma-load-bench" --mode store --tier dram --idx "$f.idx" --dir "$work/nvme"
    [ -n "${UMA_GPU:-}" ] && run "dram-stream:$id" "$B/uma-load-bench" --mode store --tier dram --path stream --idx "$f.idx" --dir "$work/nvme"
    [ -n "${UMA_GPU:-}" ] && run "dram-map:$id" "$B/uma-load-bench" --mode store --tier dram --path map --idx "$f.idx" --dir "$work/nvme"
    if [ -n "$base" ]; then
      rm -rf "$work/remote-nvme"; mkdir -p "$work/remote-nvme"
      run "remote:$id" "$B/uma-load-bench" --mode store --tier remote --idx "$f.idx" --dir "$work/remote-nvme" --url "$base/$id.gguf" --prefault
    fi
  done
  runs=$runs_saved
done

python3 - "$out" "$link_mbit" "$link_note" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
link = float(sys.argv[2]) * 1e6 / 8
by = {}
for r in rows:
    by.setdefault(r["label"], []).append(r)
def med(label, key):
    v = [r[key] for r in by.get(label, []) if key in r]
    return statistics.median(v) if v else float("nan")
models = sorted({l.split(":", 1)[1] for l in by if ":" in l})
print(f"remote tier link: {sys.argv[3]}" + (f" = {link/1e9:.3f} GB/s" if "none" not in sys.argv[3] else ""))
for m in models:
    fio, mem, h2d = med(f"fio:{m}", "gb_s"), med(f"memcpy:{m}", "gb_s"), med(f"h2d:{m}", "gb_s")
    size = by[f"nvme:{m}"][0]["bytes"]
    print(f"\n{m}: {size/1e9:.2f} GB; fio O_DIRECT read {fio:.2f} GB/s; memcpy {mem:.2f} GB/s" + (f"; pinned H2D {h2d:.2f} GB/s" if h2d == h2d else ""))
    print(f"(medians of {len(by[f'fio:{m}'])} rounds; fio per round: " + ", ".join(f"{r['gb_s']:.2f}" for r in by[f'fio:{m}']) + ")")
    print(f"{'how':<20}{'load s':>8}{'GB/s':>7}{'1st tok s':>10}{'tier fill GB/s':>16}  fill vs limit")
    mm = med(f"llama-mmap:{m}", "first_token_s")
    for label, limit, lname in [("llama-mmap", None, ""), ("llama-mmap-warm", None, ""), ("llama-direct", None, ""),
                                ("nvme", fio, "fio"), ("nvme-fresh-memory", fio, "fio"), ("dram", h2d if h2d == h2d else mem, "h2d" if h2d == h2d else "memcpy"),
                                ("dram-stream", h2d, "h2d"), ("dram-map", h2d, "h2d"), ("remote", link / 1e9, "link")]:
        key = f"{label}:{m}"
        if key not in by: continue
        load, first = med(key, "load_s"), med(key, "first_token_s")
        fills = [r["fills"][-1]["seconds"] for r in by[key] if r.get("fills")]
        fill = statistics.median(fills) if fills else float("nan")
        fill_gbs = size / fill / 1e9 if fills else float("nan")
        ratio = ""
        if label == "remote": ratio = f"load {load/(size/link):.2f} x bytes/link"
        elif label.startswith("dram"): ratio = f"load {size/load/1e9/limit:.2f} of {lname}" if lname == "h2d" else "(no read: mapped in place)"
        elif limit: ratio = f"{fill_gbs/limit:.2f} of {lname}"
        print(f"{label:<20}{load:>8.3f}{size/load/1e9:>7.2f}{first:>10.3f}{fill_gbs:>16.2f}  {ratio}  1st token {first/mm:.2f}x llama mmap")
        tens = [r["tensor_bytes"] / r["tensor_s"] / 1e9 for r in by[key] if r.get("tensor_s", 0) > 0]
        if tens:  # the copy of the weights alone: llama.cpp's metadata, vocabulary and allocations before it left out
            t = statistics.median(tens)
            print(f"{'':<20}its tensors {t:.2f} GB/s" + (f" = {t/limit:.2f} of {lname}" if limit == limit and limit else ""))
PY
