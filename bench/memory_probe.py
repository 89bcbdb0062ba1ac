#!/usr/bin/env python3
"""One server start measured: start-to-ready, RSS after one request, KV cells, GPU memory.

  memory_probe.py NAME PORT LOG -- COMMAND...

Starts COMMAND (a server listening on 127.0.0.1:PORT, logging to LOG), times it from spawn to the
first 200 from GET /health (polled every 10 ms), sends one completion, then reads the process's
VmRSS and VmHWM, its GPU memory (nvidia-smi, when there is one) and the KV cells it allocated
(umad: its kv_cells_total metric; llama-server: its "llama_kv_cache: size = ... (N cells" log
line), and prints one JSON line. The server is stopped (SIGTERM) before it returns; with
--keep it is left running and its pid is in the JSON (bench/memory.sh then runs a workload on it).
"""
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request


def get(port, path, timeout=2):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as r:
        return r.status, r.read().decode()


def post(port, path, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


def status_kib(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def gpu_mib(pid):
    try:
        out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in out.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and parts[0] == str(pid):
            return int(parts[1])
    return None


def kv_cells(port, logfile):
    try:
        _, text = get(port, "/metrics")
        m = re.search(r"^uma_kv_cache_cells (\d+)", text, re.M)
        if m:
            return int(m.group(1))
    except OSError:
        pass
    with open(logfile, errors="replace") as f:
        cells = [int(x) for x in re.findall(r"llama_kv_cache: size = .*?\(\s*(\d+) cells", f.read())]
    return sum(cells) if cells else None


def main():
    keep = "--keep" in sys.argv
    args = [a for a in sys.argv[1:] if a != "--keep"]
    sep = args.index("--")
    name, port, logfile = args[0], int(args[1]), args[2]
    cmd = args[sep + 1:]
    log = open(logfile, "w")
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    ready = None
    while time.monotonic() - t0 < 600 and proc.poll() is None:
        try:
            if get(port, "/health", timeout=1)[0] == 200:
                ready = time.monotonic() - t0
                break
        except OSError:
            pass
        time.sleep(0.01)
    if ready is None:
        proc.kill()
        sys.exit(f"{name}: not ready (exit {proc.poll()}); see {logfile}")
    post(port, "/v1/completions", {"prompt": "hello world", "max_tokens": 8, "temperature": 0})
    row = {"name": name, "ready_s": round(ready, 3), "rss_mib": round(status_kib(proc.pid, "VmRSS") / 1024, 1),
           "hwm_mib": round(status_kib(proc.pid, "VmHWM") / 1024, 1), "kv_cells": kv_cells(port, logfile),
           "gpu_mib": gpu_mib(proc.pid), "pid": proc.pid}
    print(json.dumps(row), flush=True)
    if keep:
        os._exit(0)  # the server runs on; the caller stops it
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()


if __name__ == "__main__":
    main()
