#!/usr/bin/env python3
"""Turns bench/compare.sh results into a ratio table (markdown) and PNG plots (gnuplot).

usage: bench/report.py OUT_DIR CONCURRENCY...
"""
import json, os, shutil, subprocess, sys

out, conc = sys.argv[1], [int(c) for c in sys.argv[2:]]
def load(name):
    with open(os.path.join(out, name)) as f:
        return json.load(f)
def run(server, workload, label=None):
    runs = load(f"{server}-{workload}.json")["runs"]
    return next(r for r in runs if label is None or r["label"] == label)
def ratio(a, b):
    return f"{a / b:.2f}" if b else "n/a"

bench = load("llama-bench.json")
pp = next(r["avg_ts"] for r in bench if r["n_prompt"] > 0)
tg = next(r["avg_ts"] for r in bench if r["n_gen"] > 0)
batched = {}
with open(os.path.join(out, "llama-batched-bench.jsonl")) as f:
    for line in f:
        j = json.loads(line)
        batched[j["pl"]] = j["speed_tg"]

rows = []
def row(name, u, l, key, fmt="{:.1f}", higher_better=True):
    uv, lv = key(u), key(l)
    rows.append((name, fmt.format(uv), fmt.format(lv), ratio(uv, lv) if higher_better else ratio(lv, uv)))

for c in conc:
    u, l = run("umad", f"c{c}"), run("llama-server", f"c{c}")
    row(f"{c} stream(s): output tok/s", u, l, lambda r: r["output_tok_s"])
    row(f"{c} stream(s): TTFT p50 ms", u, l, lambda r: r["ttft_ms"]["p50"], "{:.0f}", False)
    row(f"{c} stream(s): ITL p99 ms", u, l, lambda r: r["itl_ms"]["p99"], "{:.0f}", False)
    row(f"{c} stream(s): ITL max ms", u, l, lambda r: r["itl_ms"]["max"], "{:.0f}", False)
for cls in ("interactive", "background"):
    u, l = run("umad", "mixed", cls), run("llama-server", "mixed", cls)
    if cls == "interactive":
        row("mixed, interactive: ITL p50 ms", u, l, lambda r: r["itl_ms"]["p50"], "{:.0f}", False)
        row("mixed, interactive: ITL p99 ms", u, l, lambda r: r["itl_ms"]["p99"], "{:.0f}", False)
        row("mixed, interactive: ITL max ms", u, l, lambda r: r["itl_ms"]["max"], "{:.0f}", False)
        row("mixed, interactive: output tok/s", u, l, lambda r: r["output_tok_s"])
    else:
        row("mixed, background: TTFT p50 ms", u, l, lambda r: r["ttft_ms"]["p50"], "{:.0f}", False)
u, l = run("umad", "prefix"), run("llama-server", "prefix")
row("shared prefix: TTFT p50 ms", u, l, lambda r: r["ttft_ms"]["p50"], "{:.0f}", False)
row("shared prefix: output tok/s", u, l, lambda r: r["output_tok_s"])

print(f"Physical references: llama-bench pp128 {pp:.1f} t/s, tg64 {tg:.1f} t/s; llama-batched-bench S_TG "
      + ", ".join(f"B={b} {v:.1f}" for b, v in sorted(batched.items())) + " t/s\n")
print("| measure | umad | llama-server | umad advantage (x) |\n|---|---|---|---|")
for r in rows:
    print(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]} |")
print("\n(umad advantage: umad/llama-server for throughput, llama-server/umad for latencies; > 1 means umad is better.)\n")
print("| served decode efficiency (output tok/s ÷ llama-batched-bench S_TG at the same batch) | umad | llama-server |\n|---|---|---|")
for c in conc:
    if c in batched:
        print(f"| {c} stream(s) | {run('umad', f'c{c}')['output_tok_s'] / batched[c]:.2f} | "
              f"{run('llama-server', f'c{c}')['output_tok_s'] / batched[c]:.2f} |")

# Plots.
if shutil.which("gnuplot"):
    with open(os.path.join(out, "throughput.dat"), "w") as f:
        for c in conc:
            f.write(f"{c} {run('umad', f'c{c}')['output_tok_s']} {run('llama-server', f'c{c}')['output_tok_s']} {batched.get(c, 'NaN')}\n")
    with open(os.path.join(out, "latency.dat"), "w") as f:
        for i, (lbl, key) in enumerate([("c16 TTFT p50", ("c%d" % conc[-1], None, "ttft_ms", "p50")),
                                        ("c16 ITL p50", ("c%d" % conc[-1], None, "itl_ms", "p50")),
                                        ("c16 ITL p99", ("c%d" % conc[-1], None, "itl_ms", "p99")),
                                        ("c16 ITL max", ("c%d" % conc[-1], None, "itl_ms", "max")),
                                        ("mixed ITL p99", ("mixed", "interactive", "itl_ms", "p99")),
                                        ("mixed ITL max", ("mixed", "interactive", "itl_ms", "max"))]):
            w, cls, metric, q = key
            f.write(f'"{lbl}" {run("umad", w, cls)[metric][q]} {run("llama-server", w, cls)[metric][q]}\n')
    script = f"""
set terminal pngcairo size 900,540
set output '{out}/throughput.png'
set title 'Output tokens/s vs concurrent streams (small Q8_0, {os.path.basename(out)})'
set xlabel 'concurrent streams'; set ylabel 'output tok/s'; set key left top; set grid
plot '{out}/throughput.dat' u 1:2 w lp lw 2 t 'umad', '' u 1:3 w lp lw 2 t 'llama-server', '' u 1:4 w lp dt 2 t 'llama-batched-bench S\\_TG'
set output '{out}/latency.png'
set title 'TTFT and inter-token latency (ms, lower is better)'
set style data histograms; set style fill solid 0.8; set boxwidth 0.9; set xtics rotate by -20
unset xlabel; set logscale y; set ylabel 'ms'; set key outside right top
plot '{out}/latency.dat' u 2:xtic(1) t 'umad', '' u 3 t 'llama-server'
"""
    subprocess.run(["gnuplot"], input=script.encode(), check=True)
    print(f"\nPlots: {out}/throughput.png, {out}/latency.png")
