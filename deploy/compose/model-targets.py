#!/usr/bin/env python3
"""Prometheus targets for the models the agents serve now (file_sd JSON).

A uma-agent runs one umad per loaded model, each on an ephemeral port that a static scrape config
cannot name; its GET /models lists them (`http` of each resident model). Every few seconds this
writes one target per loaded model, labelled with the model, its loader and the store tier its
bytes are in, to the file Prometheus's file_sd_configs reads (replaced whole, never half written).

  model-targets.py --agents NAME=HOST:PORT,... --key-file FILE --out FILE [--every SECONDS]
"""
import argparse
import json
import os
import sys
import time
import urllib.request


def agent_models(address, key):
    headers = {"Authorization": "Bearer " + key} if key else {}
    request = urllib.request.Request("http://%s/models" % address, headers=headers)
    with urllib.request.urlopen(request, timeout=3) as reply:
        return json.load(reply).get("models", [])


def targets(agents, key):
    groups = []
    for name, address in agents:
        try:
            models = agent_models(address, key)
        except (OSError, ValueError) as e:
            print("model-targets: %s (%s): %s" % (name, address, e), file=sys.stderr, flush=True)
            continue
        for m in models:
            url = m.get("http") or ""
            if m.get("state") != "loaded" or "://" not in url:
                continue
            groups.append({"targets": [url.split("://", 1)[1].rstrip("/")],
                           "labels": {"model": m.get("model", ""), "loader": name, "tier": m.get("tier", "")}})
    return groups


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--agents", required=True, help="NAME=HOST:PORT, comma-separated")
    ap.add_argument("--key-file", help="the cluster key (the agents' --api-key-file)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--every", type=float, default=5.0)
    args = ap.parse_args()
    agents = [item.split("=", 1) for item in args.agents.split(",") if "=" in item]
    while True:
        key = ""
        if args.key_file:
            with open(args.key_file) as f:  # read each round: a rotated key is picked up
                key = f.readline().strip()
        tmp = args.out + ".tmp"
        with open(tmp, "w") as f:
            json.dump(targets(agents, key), f)
        os.replace(tmp, args.out)
        time.sleep(args.every)


if __name__ == "__main__":
    main()
