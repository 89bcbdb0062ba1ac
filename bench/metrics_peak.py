#!/usr/bin/env python3
"""Samples a umad's /metrics until SIGTERM, then prints the peak KV cells its sessions and kept
prefixes held at one time, as one JSON line.

   bench/metrics_peak.py PORT [INTERVAL_S]

Cells held: per-sequence KV, the tokens in the sessions' streams plus the kept prefixes' cells
(each stream holds its own copy of a shared prefix); unified KV, the cells granted plus the kept
prefixes' (a prefix shared between sequences is one set of cells). Per-sequence KV grants nothing,
so a server that granted cells is unified. A server without these gauges (llama-server) gives null.
"""
import json
import re
import signal
import sys
import time
import urllib.request

port = int(sys.argv[1])
interval = float(sys.argv[2]) if len(sys.argv) > 2 else 0.05
names = ("uma_kv_cache_tokens_used", "uma_kv_cache_cells_granted", "uma_prefix_cache_kept_cells")
stop = False


def on_term(*_):
    global stop
    stop = True


signal.signal(signal.SIGTERM, on_term)
peak_seq = peak_unified = None
granted_seen = False
while not stop:
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
    except OSError:
        time.sleep(interval)
        continue
    v = {}
    for n in names:
        m = re.search(rf"^{n} (\d+)", text, re.M)
        if m:
            v[n] = int(m.group(1))
    if len(v) == len(names):
        granted_seen |= v["uma_kv_cache_cells_granted"] > 0
        seq = v["uma_kv_cache_tokens_used"] + v["uma_prefix_cache_kept_cells"]
        uni = v["uma_kv_cache_cells_granted"] + v["uma_prefix_cache_kept_cells"]
        peak_seq = seq if peak_seq is None else max(peak_seq, seq)
        peak_unified = uni if peak_unified is None else max(peak_unified, uni)
    time.sleep(interval)
held = peak_unified if granted_seen else peak_seq
print(json.dumps({"kv_cells_held_peak": held, "layout": None if held is None else ("unified" if granted_seen else "per-seq")}))
