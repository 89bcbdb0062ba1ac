#!/usr/bin/env python3
"""Streams of an oracle-structured model for bench/spec.sh (speculative decoding).

  spec_client.py URL WORKLOAD STREAMS REQUESTS_PER_STREAM MAX_TOKENS [FIRST_REQUEST [EXTRA_JSON]]
      WORKLOAD copy:  a passage of consecutive token ids, a newline, then the passage's first four
                      ids: the model (greedy next = last + 1) repeats the passage (prompt lookup's
                      case: an edit, a quote, code copied back)
               fresh: a prompt with no repeats: nothing to look up (what drafting costs when idle)
               decoy: every pair the model will write is in the prompt, followed by another
                      token: each draft found is wrong (what a wrong guess costs, and backing off)
      FIRST_REQUEST numbers the prompts (a warm-up with other numbers leaves no cached prompt)
      -> JSON: tokens, seconds, tok_s (all streams), decode_tok_s (per stream, median: tokens after
         the first over the time from the first to the last), ttft_ms (median), errors
Prompts go as token ids to /v1/completions (umad and llama-server both take them), streamed.
"""
import http.client
import json
import statistics
import sys
import threading
import time
import urllib.parse


def prompt(workload, stream, request, passage):
    base = 1000 + 997 * (stream * 31 + request) % 20000
    if workload == "copy":
        return list(range(base, base + passage)) + [13] + list(range(base, base + 4))
    if workload == "decoy":
        return [x for t in range(base, base + passage) for x in (t, t + 1, 25000 + t % 5000)] + [13, base, base + 1]
    # fresh: ids far apart, never a repeated pair, ending where the continuation is unknown
    return [base + 7 * k for k in range(64)]


def one(url, body):
    u = urllib.parse.urlparse(url)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
    c.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError(f"status {r.status}: {r.read()[:200]!r}")
    t0 = time.monotonic()
    first = last = usage = None
    n = 0
    for raw in r:
        line = raw.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        j = json.loads(line[6:])
        if j.get("usage"):
            usage = j["usage"].get("completion_tokens")
        if not j.get("choices") or not j["choices"][0].get("text"):
            continue
        now = time.monotonic()
        first = first or now
        last = now
        n += 1  # a chunk; usage (when sent) gives the token count
    c.close()
    return (usage if usage else n), t0, first, last


def main():
    url, workload, streams, per, max_tokens = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    first_request = int(sys.argv[6]) if len(sys.argv) > 6 else 0
    extra = json.loads(sys.argv[7]) if len(sys.argv) > 7 else {}
    lock = threading.Lock()
    rates, ttfts, totals, errors = [], [], [], [0]

    def worker(s):
        for k in range(first_request, first_request + per):
            body = {"prompt": prompt(workload, s, k, 400 if workload != "decoy" else 280), "max_tokens": max_tokens, "temperature": 0,
                    "stream": True, "ignore_eos": True, "stream_options": {"include_usage": True}}
            body.update(extra)
            t_send = time.monotonic()
            try:
                n, _, first, last = one(url, body)
            except Exception as e:  # noqa: BLE001 - counted, the run goes on
                print(f"request failed: {e}", file=sys.stderr)
                with lock:
                    errors[0] += 1
                continue
            with lock:
                totals.append(n)
                if first is not None:
                    ttfts.append((first - t_send) * 1000)
                if first is not None and last > first and n > 1:
                    rates.append((n - 1) / (last - first))

    t0 = time.monotonic()
    threads = [threading.Thread(target=worker, args=(s,)) for s in range(streams)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    secs = time.monotonic() - t0
    print(json.dumps({"tokens": sum(totals), "seconds": round(secs, 3), "tok_s": round(sum(totals) / secs, 1),
                      "decode_tok_s": round(statistics.median(rates), 1) if rates else 0,
                      "ttft_ms": round(statistics.median(ttfts), 1) if ttfts else 0, "errors": errors[0]}))


if __name__ == "__main__":
    main()
