#!/usr/bin/env python3
"""Image chats against an OpenAI-compatible server (umad --mmproj, llama-server --mmproj).

  vision_client.py URL cold N [SEED]     N chats, each with a new image (seeds SEED..), one at a time
  vision_client.py URL turns N           one conversation of N turns about one image
  vision_client.py URL concurrent C N    C clients, N chats each, every chat a new image

Prints one JSON object: TTFT per request (ms, streamed: received -> first content), totals.
Images are 640x480 PNGs of seeded noise (as costly to decode as photos; the projector sees
whatever it is given).
"""
import json
import random
import struct
import sys
import threading
import time
import urllib.request
import zlib
import base64


def png(seed, w=640, h=480):
    rnd = random.Random(seed)
    rows = b"".join(b"\x00" + bytes(rnd.getrandbits(8) for _ in range(3 * w)) for _ in range(h))

    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xFFFFFFFF)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows, 1)) + chunk(b"IEND", b""))


def image_part(seed):
    return {"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(png(seed)).decode()}}


def chat(url, messages, max_tokens):
    """Streams one chat: (ttft_ms, total_ms, text, usage)."""
    body = {"messages": messages, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    req = urllib.request.Request(url + "/v1/chat/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    t0 = time.perf_counter()
    ttft, text, usage = None, "", {}
    with urllib.request.urlopen(req, timeout=600) as r:
        for line in r:
            line = line.strip()
            if not line.startswith(b"data: ") or line == b"data: [DONE]":
                continue
            j = json.loads(line[6:])
            for c in j.get("choices") or []:
                piece = (c.get("delta") or {}).get("content")
                if piece:
                    if ttft is None:
                        ttft = (time.perf_counter() - t0) * 1000
                    text += piece
            usage = j.get("usage") or usage
    return ttft, (time.perf_counter() - t0) * 1000, text, usage


def pct(xs, p):
    xs = sorted(x for x in xs if x is not None)
    return round(xs[min(len(xs) - 1, int(p / 100 * len(xs)))], 1) if xs else None


def main():
    url, mode = sys.argv[1], sys.argv[2]
    if mode == "cold":
        n = int(sys.argv[3])
        seed = int(sys.argv[4]) if len(sys.argv) > 4 else 1000
        ttfts = []
        for i in range(n):
            ttft, _, _, _ = chat(url, [{"role": "user", "content": [image_part(seed + i), {"type": "text", "text": "Describe this picture."}]}], 8)
            ttfts.append(ttft)
        print(json.dumps({"mode": "cold", "ttft_ms": [round(t, 1) for t in ttfts], "ttft_p50_ms": pct(ttfts, 50)}))
    elif mode == "turns":
        n = int(sys.argv[3])
        messages = [{"role": "user", "content": [image_part(7), {"type": "text", "text": "Describe this picture."}]}]
        ttfts, cached = [], []
        for turn in range(n):
            ttft, _, text, usage = chat(url, messages, 16)
            ttfts.append(ttft)
            cached.append((usage.get("prompt_tokens_details") or {}).get("cached_tokens"))
            messages += [{"role": "assistant", "content": text}, {"role": "user", "content": f"And what else, point {turn + 1}?"}]
        print(json.dumps({"mode": "turns", "ttft_ms": [round(t, 1) for t in ttfts], "cached_tokens": cached,
                          "later_turns_ttft_p50_ms": pct(ttfts[1:], 50)}))
    elif mode == "concurrent":
        clients, n = int(sys.argv[3]), int(sys.argv[4])
        ttfts, tokens, lock = [], [0], threading.Lock()

        def client(c):
            for i in range(n):
                ttft, _, _, usage = chat(url, [{"role": "user", "content": [image_part(5000 + 100 * c + i), {"type": "text", "text": "Describe this picture."}]}], 32)
                with lock:
                    ttfts.append(ttft)
                    tokens[0] += usage.get("completion_tokens", 0)
        t0 = time.perf_counter()
        threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - t0
        print(json.dumps({"mode": "concurrent", "clients": clients, "requests": clients * n, "wall_s": round(wall, 2),
                          "requests_per_s": round(clients * n / wall, 3), "tokens_per_s": round(tokens[0] / wall, 1),
                          "ttft_p50_ms": pct(ttfts, 50), "ttft_p99_ms": pct(ttfts, 99)}))


if __name__ == "__main__":
    main()
