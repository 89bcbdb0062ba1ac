#!/usr/bin/env python3
"""The serverless workload's client (bench/serverless.sh): open-loop Poisson arrivals, each request
for one of N models drawn from a Zipf popularity, streamed through a gateway; the time to the first
token of each, and whether it failed. Prints one JSON summary line.

usage: serverless_client.py URL MODELS(comma-separated, most popular first) RATE(req/s) SECONDS
       [--zipf S] [--max-tokens N] [--seed K] [--timeout SEC]
"""
import argparse
import http.client
import json
import random
import statistics
import threading
import time
import urllib.parse


def pct(values, p):
    if not values:
        return float("nan")
    v = sorted(values)
    return v[min(len(v) - 1, int(round(p / 100.0 * (len(v) - 1))))]


def one(url, model, prompt, max_tokens, timeout, out, lock):
    u = urllib.parse.urlparse(url)
    body = json.dumps({"model": model, "prompt": prompt, "max_tokens": max_tokens, "stream": True})
    start = time.monotonic()
    ttft, error = None, None
    try:
        c = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
        c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
        r = c.getresponse()
        if r.status != 200:
            error = "HTTP %d %s" % (r.status, r.read(300).decode(errors="replace"))
        else:
            text = ""
            for raw in r:
                line = raw.decode(errors="replace").strip()
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                ev = json.loads(data)
                if "error" in ev:
                    error = json.dumps(ev["error"])[:300]
                    break
                piece = ev["choices"][0].get("text", "")
                if piece and ttft is None:
                    ttft = time.monotonic() - start
                text += piece
            if error is None and ttft is None:
                error = "no tokens"
        c.close()
    except Exception as e:  # a broken connection is a failed request
        error = repr(e)[:300]
    with lock:
        out.append({"model": model, "ttft": ttft, "error": error, "at": start})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("models")
    ap.add_argument("rate", type=float)
    ap.add_argument("seconds", type=float)
    ap.add_argument("--zipf", type=float, default=1.1)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=300)
    a = ap.parse_args()
    models = a.models.split(",")
    rng = random.Random(a.seed)
    weights = [1.0 / (k + 1) ** a.zipf for k in range(len(models))]
    words = "the quick brown fox jumps over a lazy dog while seven wizards quietly box".split()
    out, lock, threads = [], threading.Lock(), []
    t0 = time.monotonic()
    next_at = t0
    while True:
        next_at += rng.expovariate(a.rate)
        if next_at - t0 > a.seconds:
            break
        time.sleep(max(0.0, next_at - time.monotonic()))
        model = rng.choices(models, weights)[0]
        prompt = " ".join(rng.choice(words) for _ in range(24))
        t = threading.Thread(target=one, args=(a.url, model, prompt, a.max_tokens, a.timeout, out, lock), daemon=True)
        t.start()
        threads.append(t)
    for t in threads:
        t.join()
    ttfts = [r["ttft"] * 1000 for r in out if r["error"] is None]
    failed = [r for r in out if r["error"] is not None]
    per_model = {}
    for r in out:
        per_model[r["model"]] = per_model.get(r["model"], 0) + 1
    print(json.dumps({
        "requests": len(out), "failed": len(failed), "errors": [f["error"] for f in failed[:5]],
        "ttft_ms": {"p50": pct(ttfts, 50), "p90": pct(ttfts, 90), "p99": pct(ttfts, 99),
                    "mean": statistics.mean(ttfts) if ttfts else float("nan")},
        "per_model": per_model, "wall_s": time.monotonic() - t0,
    }))


if __name__ == "__main__":
    main()
