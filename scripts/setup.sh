#!/usr/bin/env bash
# Sets a fresh Debian 12 machine up to build UMA Serve: installs the Debian packages listed in
# deps/apt-packages.txt (only those missing), then fetches, verifies and builds the pinned llama.cpp
# into the per-machine cache (scripts/llama.sh). Safe to run again: every step is skipped when done.
#   scripts/setup.sh [TARGET...]                     online (Debian mirror, npm registry)
#   scripts/setup.sh --from-bundle DIR [TARGET...]   offline, from scripts/bundle.sh's output: the
#       bundle's Debian packages that are missing are unpacked into a prefix in the cache (nothing
#       is installed system-wide: the machine may not be Debian 12), llama.cpp comes from the
#       bundle's verified source; a compiler, cmake, ninja, xz and python3 must be there.
# UMA_GPU=cuda builds llama.cpp with CUDA (scripts/llama.sh).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
log() { printf '[setup] %s\n' "$*" >&2; }
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }

# UMA_BUNDLE=DIR does the same for every script that calls this one (demo, test, benchmarks).
if [ "${1:-}" != "--from-bundle" ] && [ -n "${UMA_BUNDLE:-}" ]; then set -- --from-bundle "$UMA_BUNDLE" "$@"; fi
if [ "${1:-}" = "--from-bundle" ]; then
  bundle=$(cd "${2:?--from-bundle DIR}" && pwd)
  shift 2
  (cd "$bundle" && sha256sum --quiet -c SHA256SUMS) || { log "$bundle: SHA256SUMS does not match"; exit 1; }
  for tool in c++ cmake ninja xz python3; do
    command -v "$tool" >/dev/null || { log "--from-bundle needs $tool on PATH"; exit 1; }
  done
  prefix=${UMA_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/uma-serve}/deps-prefix
  mkdir -p "$prefix"
  for deb in "$bundle"/debs/*.deb; do
    pkg=$(basename "$deb"); pkg=${pkg%%_*}
    if installed "$pkg" || [ -f "$prefix/.$pkg" ]; then continue; fi
    log "unpacking $pkg into $prefix"
    if command -v dpkg-deb >/dev/null; then
      dpkg-deb -x "$deb" "$prefix"
    else  # a .deb is an ar archive holding data.tar.*
      tmp=$(mktemp -d); (cd "$tmp" && ar x "$deb" && tar -xf data.tar.* -C "$prefix"); rm -rf "$tmp"
    fi
    touch "$prefix/.$pkg"
  done
  if [ -f "$bundle/tools/promtool.xz" ] && ! command -v promtool >/dev/null && [ ! -x "$prefix/usr/bin/promtool" ]; then
    log "unpacking promtool into $prefix"
    mkdir -p "$prefix/usr/bin"
    xz -dc "$bundle/tools/promtool.xz" >"$prefix/usr/bin/promtool"
    chmod +x "$prefix/usr/bin/promtool"
  fi
  "$root/scripts/llama.sh" --from-bundle "$bundle" "$@"
  exit 0
fi

mapfile -t want < <(grep -vE '^\s*(#|$)' "$root/deps/apt-packages.txt")
missing=()
for p in "${want[@]}"; do
  installed "$p" || missing+=("$p")
done
# npm may come from elsewhere than Debian (e.g. NodeSource); any working npm will do.
command -v npm >/dev/null || missing+=(npm)
if [ ${#missing[@]} -gt 0 ]; then
  sudo=(); [ "$(id -u)" -ne 0 ] && sudo=(sudo)
  log "installing Debian packages: ${missing[*]}"
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# promtool (tests only: `promtool check metrics` lints /metrics). Debian ships it only inside the
# `prometheus` server package, whose install would also start a server: take the one binary out of
# the package into the cache's prefix instead.
prefix=${UMA_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/uma-serve}/deps-prefix
if ! command -v promtool >/dev/null && [ ! -x "$prefix/usr/bin/promtool" ]; then
  log "unpacking promtool (Debian prometheus) into $prefix"
  tmp=$(mktemp -d)
  (cd "$tmp" && apt-get download prometheus >/dev/null 2>&1) ||
    { sudo=(); [ "$(id -u)" -ne 0 ] && sudo=(sudo); "${sudo[@]}" apt-get update -qq && (cd "$tmp" && apt-get download prometheus >/dev/null); }
  mkdir -p "$prefix"
  dpkg-deb --fsys-tarfile "$tmp"/prometheus_*.deb | tar -x -C "$prefix" ./usr/bin/promtool
  rm -rf "$tmp"
fi

"$root/scripts/llama.sh" "$@"
"$root/scripts/npm_deps.sh"
