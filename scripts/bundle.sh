#!/usr/bin/env bash
# Writes an offline bundle: everything scripts/setup.sh --from-bundle needs on a machine that
# reaches no registry (GPU servers are often air-gapped; so is our GPU test machine).
#   scripts/bundle.sh OUT_DIR
# OUT_DIR gets:
#   llama-src.tar.xz   the pinned llama.cpp source, verified here first (scripts/llama.sh), pruned of
#                      what no build needs (docs, sample models but the vocabulary the tests use,
#                      the web UI's sources); its uncompressed tar is byte-reproducible and its
#                      sha256 is pinned in deps/llama.env (LLAMA_SRC_TAR_SHA256), checked here and
#                      again where it is unpacked
#   debs/*.deb         the Debian 12 packages of deps/bundle-packages.txt (apt-get download)
#   tools/promtool.xz  promtool alone (tests only: the /metrics lint), taken out of Debian's
#                      prometheus package by scripts/setup.sh here (the package would start a server)
#   SHA256SUMS         of every file above
# Kept under 56 MiB (checked; the device tool carries 64).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${1:?usage: scripts/bundle.sh OUT_DIR}
# shellcheck source=/dev/null
. "$root/deps/llama.env"
log() { printf '[bundle] %s\n' "$*" >&2; }
mkdir -p "$out/debs"
out=$(cd "$out" && pwd)

log "llama.cpp source (fetched and verified by scripts/llama.sh)"
"$root/scripts/llama.sh" --source-only
src=$("$root/scripts/llama.sh" --print-root)/src
"$root/scripts/llama.sh" --source-tar "$src" >"$out/llama-src.tar"
sum=$(sha256sum "$out/llama-src.tar" | cut -d' ' -f1)
if [ "$sum" != "$LLAMA_SRC_TAR_SHA256" ]; then
  log "pruned source tar is $sum, deps/llama.env pins $LLAMA_SRC_TAR_SHA256"; exit 1
fi
rm -f "$out/llama-src.tar.xz"
xz -T0 -9 "$out/llama-src.tar"

log "Debian packages (deps/bundle-packages.txt)"
mapfile -t pkgs < <(grep -vE '^\s*(#|$)' "$root/deps/bundle-packages.txt")
rm -f "$out"/debs/*.deb
(cd "$out/debs" && apt-get download -q "${pkgs[@]}" >/dev/null)

log "promtool (from this machine's setup)"
prefix=${UMA_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/uma-serve}/deps-prefix
promtool=$(command -v promtool || echo "$prefix/usr/bin/promtool")
[ -x "$promtool" ] || "$root/scripts/setup.sh" >/dev/null
mkdir -p "$out/tools"
xz -T0 -9 -c "$promtool" >"$out/tools/promtool.xz"

(cd "$out" && find . -type f ! -name SHA256SUMS | sort | xargs sha256sum >SHA256SUMS)
size=$(du -sb "$out" | cut -f1)
log "$out: $((size / 1024 / 1024)) MiB"
[ "$size" -lt $((56 * 1024 * 1024)) ] || { log "over 56 MiB"; exit 1; }
