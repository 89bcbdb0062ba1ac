"""bench/agent_cold.sh's rounds: one agent per configuration, `runs` cold starts each from the DRAM
tier, and llama-server's start on the same file; prints a table and writes results.jsonl."""
import argparse, json, os, re, shutil, socket, statistics, subprocess, time, urllib.request

def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p

def post(url, body, timeout=300):
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read() or b"{}")

def get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()

def until(pred, what, limit=300):
    end = time.time() + limit
    while time.time() < end:
        try:
            if pred(): return
        except Exception:
            pass
        time.sleep(0.02)
    raise SystemExit("timed out: " + what)

def metric(page, name):
    m = re.search(r"^" + re.escape(name) + r" (\S+)$", page, re.M)
    return float(m.group(1)) if m else 0.0

def gpu_mib(pid):
    try:
        out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=10).stdout
    except Exception:
        return None
    for line in out.splitlines():
        p, m = [x.strip() for x in line.split(",")]
        if int(p) == pid: return int(m)
    return 0

def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"): return int(line.split()[1]) // 1024
    return 0

def agent_rounds(a, name, agent_flags, umad_flags):
    port = free_port()
    run = os.path.join(a.work, "run", name)
    shutil.rmtree(run, ignore_errors=True)
    store = os.path.join(a.work, "store-" + name)
    shutil.rmtree(store, ignore_errors=True); os.makedirs(store)
    shutil.copy(a.model, os.path.join(store, "cold.gguf"))
    mb = os.path.getsize(a.model) * 2 >> 20
    logf = open(os.path.join(a.work, "run", name + ".log"), "w")
    proc = subprocess.Popen([a.agent, "--listen", f"127.0.0.1:{port}", "--redis", a.redis, "--store-dir", store,
                             "--store-dram-mb", str(mb), "--run-dir", run, "--keep-alive", "-1"] + agent_flags +
                            ["--", "--threads", str(a.threads), "--n-ctx", "4096", "--max-sessions", "4"] + umad_flags,
                            stdout=logf, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    rows, extra = [], {}
    try:
        until(lambda: get(base + "/health"), "agent up")
        post(base + "/prefetch", {"model": "cold", "tier": "dram"})
        until(lambda: '"dram"' in get(base + "/models"), "the image in the DRAM tier")
        for i in range(a.runs + 1):  # the first round warms the page cache and the driver: not counted
            if "--no-standby" not in agent_flags:
                until(lambda: metric(get(base + "/metrics"), "uma_agent_standby_ready") == 1, "standby ready")
            if "--no-standby" not in agent_flags and "--no-standby-pins" not in agent_flags:
                until(lambda: metric(get(base + "/metrics"), "uma_agent_standby_pinned_images") == 1, "image pinned ahead")
            t0 = time.perf_counter()
            done = post(base + "/load", {"model": "cold", "stream": False})
            t_load = time.perf_counter() - t0
            url = done.get("http") or done.get("model", {}).get("http")
            if not url: raise SystemExit("load failed: " + json.dumps(done))
            post(url + "/v1/completions", {"prompt": "hello", "max_tokens": 1, "temperature": 0})
            t_first = time.perf_counter() - t0
            if i > 0: rows.append({"how": name, "load_s": t_load, "first_token_s": t_first})
            post(base + "/unload", {"model": "cold"})  # answers once its umad has exited
        if "--no-standby" not in agent_flags:
            until(lambda: metric(get(base + "/metrics"), "uma_agent_standby_ready") == 1, "standby ready")
            out = subprocess.run(["pgrep", "-f", "--", "--standby-fd"], capture_output=True, text=True).stdout.split()
            if out:
                pid = int(out[0])
                extra = {"standby_rss_mib": rss_mib(pid), "standby_gpu_mib": gpu_mib(pid)}
            extra["standby_starts"] = metric(get(base + "/metrics"), "uma_agent_standby_starts_total")
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    copies = []
    for f in sorted(os.listdir(run)):
        if f.endswith(".log"):
            for m in re.finditer(r"copied from host memory: (\d+) MiB in ([\d.]+) s \((?:pinning its pages ([\d.]+) s|pinned ahead)"
                                 r"; its tensors (\d+) MiB in ([\d.]+) s\)", open(os.path.join(run, f)).read()):
                t_mib, t_s = float(m.group(4)), float(m.group(5))
                copies.append((float(m.group(2)), float(m.group(3) or 0), t_s, t_mib * 1048576 / t_s / 1e9 if t_s > 0 else 0))
    if copies:  # the tensor phase: llama.cpp's copy of the weights, its setup before it left out
        for k, key in enumerate(("copy_s", "pin_s", "tensor_s", "tensor_gb_s")): extra[key] = statistics.median(c[k] for c in copies)
    return rows, extra

def llama_server_rounds(a):
    rows = []
    for i in range(a.runs + 1):
        port = free_port()
        t0 = time.perf_counter()
        proc = subprocess.Popen([a.llama_server, "-m", a.model, "--port", str(port), "-t", str(a.threads), "-c", "4096",
                                 "-np", "4", "-ngl", "999"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            until(lambda: json.loads(get(f"http://127.0.0.1:{port}/health")).get("status") == "ok", "llama-server up")
            t_load = time.perf_counter() - t0
            post(f"http://127.0.0.1:{port}/completion", {"prompt": "hello", "n_predict": 1})
            t_first = time.perf_counter() - t0
        finally:
            proc.terminate(); proc.wait(timeout=60)
        if i > 0: rows.append({"how": "llama-server (page cache warm)", "load_s": t_load, "first_token_s": t_first})
    return rows

def main():
    ap = argparse.ArgumentParser()
    for k in ("agent", "llama-server", "model", "redis", "work"): ap.add_argument("--" + k, required=True)
    ap.add_argument("--gpu", action="store_true")
    ap.add_argument("--runs", type=int, default=5); ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    results, extras = [], {}
    results += llama_server_rounds(a)
    configs = [("fresh+map", ["--no-standby"], ["--no-host-copy"]), ("fresh+copy", ["--no-standby"], []),
               ("standby+copy", ["--no-standby-pins"], [])]
    if a.gpu: configs.append(("standby+pinned ahead", [], []))
    for name, af, uf in configs:
        rows, extras[name] = agent_rounds(a, name, af, uf)
        results += rows
    with open(os.path.join(a.work, "results.jsonl"), "w") as f:
        for r in results: f.write(json.dumps(r) + "\n")
    base = statistics.median(r["first_token_s"] for r in results if r["how"].startswith("llama-server"))
    print("| how | load s (median) | first token s (median) | vs llama-server | notes |\n|---|---|---|---|---|")
    for how in dict.fromkeys(r["how"] for r in results):
        rs = [r for r in results if r["how"] == how]
        ft = statistics.median(r["first_token_s"] for r in rs)
        note = ", ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in extras.get(how, {}).items())
        print(f"| {how} | {statistics.median(r['load_s'] for r in rs):.3f} | {ft:.3f} | {ft / base:.2f} | {note} |")

main()
