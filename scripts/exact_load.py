#!/usr/bin/env python3
"""A constant load of streamed completions against an OpenAI-style endpoint, every stream checked.

  scripts/exact_load.py --url http://127.0.0.1:8000 --key-file deploy/secrets/api-key --model oracle \
      --clients 3 --max-tokens 24 --summary load.json --stop-file stop

First each prompt's answer is taken once, unstreamed (the reference: greedy and batch-exact on the
oracle model). Then CLIENTS threads stream the prompts in turn, one request after another, until
STOP_FILE exists; a request counts as failed when its status is not 200, its stream breaks, or
its text is not the reference. The summary (JSON) is rewritten after every request, so a caller
can wait for progress; the exit status is 1 when any request failed. Standard library only.
"""
import argparse
import http.client
import json
import os
import sys
import threading
import time
import urllib.parse

PROMPTS = ["hello world", "one two three", "the quick brown fox", "a b c d"]


def completion(url, key, model, prompt, max_tokens, stream, timeout):
    u = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=timeout)
    body = json.dumps({"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": stream})
    headers = {"Content-Type": "application/json", "Authorization": "Bearer " + key}
    try:
        conn.request("POST", "/v1/completions", body=body, headers=headers)
        r = conn.getresponse()
        if r.status != 200:
            raise RuntimeError("status %d: %s" % (r.status, r.read(300).decode(errors="replace")))
        if not stream:
            return json.loads(r.read())["choices"][0]["text"]
        text, done = [], False
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: "):
                continue
            data = line[len("data: "):]
            if data == "[DONE]":
                done = True
                break
            event = json.loads(data)
            if "error" in event:
                raise RuntimeError("error event: %s" % data[:300])
            text.append(event["choices"][0].get("text", ""))
        if not done:
            raise RuntimeError("the stream ended without [DONE] after %d events" % len(text))
        return "".join(text)
    finally:
        conn.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", required=True)
    ap.add_argument("--key-file", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--clients", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=24)
    ap.add_argument("--timeout", type=float, default=300, help="seconds one request may take")
    ap.add_argument("--summary", required=True)
    ap.add_argument("--stop-file", required=True)
    a = ap.parse_args()
    key = open(a.key_file).read().strip()

    reference = {}
    for p in PROMPTS:
        reference[p] = completion(a.url, key, a.model, p, a.max_tokens, False, a.timeout)
        if not reference[p]:
            sys.exit("the reference answer to %r is empty" % p)

    lock = threading.Lock()
    tally = {"ok": 0, "failed": 0, "failures": [], "longest_s": 0.0}
    t0 = time.monotonic()

    def write_summary():
        s = dict(tally, seconds=round(time.monotonic() - t0, 1))
        s["per_s"] = round(s["ok"] / s["seconds"], 2) if s["seconds"] > 0 else 0
        tmp = a.summary + ".tmp"
        with open(tmp, "w") as f:
            json.dump(s, f)
        os.replace(tmp, a.summary)

    def client(i):
        n = 0
        while not os.path.exists(a.stop_file):
            p = PROMPTS[(i + n) % len(PROMPTS)]
            n += 1
            start = time.monotonic()
            try:
                text = completion(a.url, key, a.model, p, a.max_tokens, True, a.timeout)
                why = None if text == reference[p] else "not exact: %r against %r" % (text, reference[p])
            except Exception as e:  # a broken stream, a refused connection, a timeout: all failures
                why = "%s: %s" % (type(e).__name__, e)
            with lock:
                tally["longest_s"] = max(tally["longest_s"], round(time.monotonic() - start, 2))
                if why is None:
                    tally["ok"] += 1
                else:
                    tally["failed"] += 1
                    if len(tally["failures"]) < 20:
                        tally["failures"].append("%s (prompt %r, %.1f s in)" % (why, p, time.monotonic() - t0))
                write_summary()

    with lock:
        write_summary()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(a.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    write_summary()
    print(open(a.summary).read())
    sys.exit(1 if tally["failed"] else 0)


if __name__ == "__main__":
    main()
