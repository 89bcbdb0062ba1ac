#!/usr/bin/env bash
# Sets a fresh Debian 12 machine up to build UMA Serve: installs the Debian packages listed in
# deps/apt-packages.txt (only those missing), then fetches, verifies and builds the pinned llama.cpp
# into the per-machine cache (scripts/llama.sh). Safe to run again: every step is skipped when done.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
log() { printf '[setup] %s\n' "$*" >&2; }

mapfile -t want < <(grep -vE '^\s*(#|$)' "$root/deps/apt-packages.txt")
missing=()
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
# npm may come from elsewhere than Debian (e.g. NodeSource); any working npm will do.
command -v npm >/dev/null || missing+=(npm)
if [ ${#missing[@]} -gt 0 ]; then
  sudo=(); [ "$(id -u)" -ne 0 ] && sudo=(sudo)
  log "installing Debian packages: ${missing[*]}"
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

"$root/scripts/llama.sh" "$@"
"$root/scripts/npm_deps.sh"
