#!/usr/bin/env bash
# Writes the Compose cluster's secrets, one random line each, into deploy/secrets/ (git ignores it;
# deploy/secrets.example/ shows the files):
#   api-key          what clients send the gateways (Authorization: Bearer KEY)
#   cluster-key      what gateways send agents and their models, and Prometheus sends both
#   redis-password   Redis's requirepass
# The containers run as uid 10001: as root the files become its own (mode 0400), else they stay
# yours and are made readable to all (0444), fine on a single-user machine only.
set -euo pipefail
dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/secrets
mkdir -p "$dir"
for f in api-key cluster-key redis-password; do
  [ -s "$dir/$f" ] && continue  # never replaced: running services hold the old value
  (umask 077; head -c 32 /dev/urandom | base64 | tr -d '/+=\n' >"$dir/$f"; echo >>"$dir/$f")
done
if [ "$(id -u)" -eq 0 ]; then
  chown 10001:10001 "$dir"/*; chmod 0400 "$dir"/*
else
  chmod 0444 "$dir"/*
fi
echo "$dir: api-key, cluster-key, redis-password"
