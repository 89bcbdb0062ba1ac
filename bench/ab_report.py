"""The before/after table of bench/ab.sh and bench/gpu_ab.sh: one line per run, new/old tok/s.
   ab_report.py OUT_DIR ROUNDS OLD_LABEL [KIND ...]
Runs are OUT_DIR/{old,new}{round}.json, or {old,new}-{kind}-{round}.json for each KIND given."""
import json
import os
import sys

out, rounds, old_label, kinds = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:] or [""]
for kind in kinds:
    tot = {"old": 0.0, "new": 0.0}
    for r in range(1, rounds + 1):
        for side in ("old", "new"):
            name = f"{side}-{kind}-{r}.json" if kind else f"{side}{r}.json"
            j = json.load(open(os.path.join(out, name)))["runs"][0]
            tot[side] += j["output_tok_s"]
            label = old_label if side == "old" else "working tree"
            print(f"{kind + ' ' if kind else ''}{side} ({label}) round {r}: {j['output_tok_s']:.1f} tok/s, "
                  f"ITL p50/p99 {j['itl_ms']['p50']:.2f}/{j['itl_ms']['p99']:.2f} ms, "
                  f"TTFT p50/p99 {j['ttft_ms']['p50']:.0f}/{j['ttft_ms']['p99']:.0f} ms")
    print(f"{kind + ' ' if kind else ''}new/old tok/s: {tot['new'] / tot['old']:.3f}")
