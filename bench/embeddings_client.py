#!/usr/bin/env python3
"""Embeddings load and the decode stream beside it, for bench/embeddings.sh.

  embeddings_client.py throughput URL REQUESTS INPUTS_PER_REQUEST WORDS CONCURRENCY
      -> JSON: requests, inputs, seconds, inputs_per_s, tokens_per_s, errors
  embeddings_client.py itl URL TOKENS [BURST_REQUESTS INPUTS WORDS]
      -> JSON: the inter-token gaps (ms) of one streamed completion (p50, p99, max), with an
         embeddings burst sent beside it when BURST_REQUESTS > 0.
"""
import json
import sys
import threading
import time
import urllib.request

WORDS = ("river stone cloud bridge garden lantern harbor meadow copper violet engine signal "
         "window forest candle silver thunder pocket marble ladder").split()


def text(i, words):
    return " ".join(WORDS[(i * 7 + k * 3) % len(WORDS)] for k in range(words)) + f" #{i}"


def post(url, body, timeout=600):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def throughput(base, requests, per, words, conc):
    lock = threading.Lock()
    state = {"next": 0, "inputs": 0, "tokens": 0, "errors": 0}

    def worker():
        while True:
            with lock:
                i = state["next"]
                state["next"] += 1
            if i >= requests:
                return
            try:
                j = post(base + "/v1/embeddings", {"model": "m", "input": [text(i * per + k, words) for k in range(per)]})
                with lock:
                    state["inputs"] += len(j["data"])
                    state["tokens"] += j.get("usage", {}).get("prompt_tokens", 0)
            except Exception:  # noqa: BLE001 - counted, the run goes on
                with lock:
                    state["errors"] += 1

    t0 = time.monotonic()
    threads = [threading.Thread(target=worker) for _ in range(conc)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    s = time.monotonic() - t0
    return {"requests": requests, "inputs": state["inputs"], "seconds": round(s, 3),
            "inputs_per_s": round(state["inputs"] / s, 2), "tokens_per_s": round(state["tokens"] / s, 1),
            "errors": state["errors"]}


def itl(base, tokens, burst=0, per=16, words=48):
    stop = threading.Event()

    def embed_burst():
        for i in range(burst):
            if stop.is_set():
                return
            post(base + "/v1/embeddings", {"input": [text(i * per + k, words) for k in range(per)]})

    body = {"prompt": "hello world", "max_tokens": tokens, "stream": True, "ignore_eos": True}
    req = urllib.request.Request(base + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    stamps = []
    burster = threading.Thread(target=embed_burst) if burst > 0 else None
    with urllib.request.urlopen(req, timeout=600) as r:
        for line in r:
            if not line.startswith(b"data: {"):
                continue
            stamps.append(time.monotonic())
            if burster is not None and len(stamps) == 5:
                burster.start()  # the stream is running: the burst lands beside it
    stop.set()
    if burster is not None and burster.is_alive():
        burster.join()
    gaps = sorted((b - a) * 1000 for a, b in zip(stamps[5:], stamps[6:]))
    pick = lambda q: round(gaps[min(len(gaps) - 1, int(q * len(gaps)))], 2)
    return {"tokens": len(stamps), "itl_p50_ms": pick(0.5), "itl_p99_ms": pick(0.99), "itl_max_ms": round(gaps[-1], 2)}


if __name__ == "__main__":
    mode, url = sys.argv[1], sys.argv[2]
    a = [int(x) for x in sys.argv[3:]]
    print(json.dumps(throughput(url, *a) if mode == "throughput" else itl(url, *a)))
