#!/usr/bin/env python3
"""The ratio tables of bench/spec.sh and bench/gpu_spec.sh, from their rows file.

  spec_table.py ROWS_FILE     (lines: SERVER WORKLOAD c=N JSON, from bench/spec_client.py)
Rows a run did not make are left out; a row measured in several rounds is their mean.
"""
import json
import sys

# A row measured in several rounds (bench/spec.sh alternates servers row by row) counts as the
# mean of its rounds.
runs = {}
for line in open(sys.argv[1]):
    server, work, conc, js = line.split(" ", 3)
    runs.setdefault((server, work, conc), []).append(json.loads(js))
rows = {k: {m: sum(r[m] for r in v) / len(v) for m in ("decode_tok_s", "tok_s")} for k, v in runs.items()}
rounds = max((len(v) for v in runs.values()), default=0)


def table(title, pairs, works):
    print(title)
    for conc in ("c=1", "c=16", "c=64"):
        key = "decode_tok_s" if conc == "c=1" else "tok_s"
        for work in works:
            try:
                a, b, c, d = (rows[(s, work, conc)][key] for s in pairs)
            except KeyError:
                continue
            print(f"{work:6} {conc:5}  {a:8.1f}  {b:10.1f}  {b / a:5.2f}  {c:11.1f}  {d:11.1f}  {d / c:5.2f}  {b / d:5.2f}")


table("\nworkload       umad off  umad lookup  (x)   llama-server  ngram-simple  (x)   lookup / ngram-simple",
      ("umad-off", "umad-lookup", "llama-server-none", "llama-server-ngram-simple"), ("copy", "fresh", "decoy"))
table("\ndraft model       umad off  umad draft   (x)   llama-server  -md draft     (x)   umad / llama-server",
      ("umad-off", "umad-draft", "llama-server-none", "llama-server-draft-simple"), ("fresh",))
print("c=1: decode tok/s of one stream (first token to last); c=16, c=64: all streams' tokens over the wall time"
      + (f"; each the mean of {rounds} rounds" if rounds > 1 else ""))
