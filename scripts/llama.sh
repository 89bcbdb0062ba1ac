#!/usr/bin/env bash
# Fetches, verifies and builds the pinned llama.cpp into a per-machine cache outside git.
#
#   scripts/llama.sh [TARGET...]     build libllama (+ llama-bench) and any extra llama.cpp targets
#   scripts/llama.sh --print-root    print the cache folder the project's CMake reads
#
# Source: the npm registry package node-llama-cpp (deps/llama.env pins version and sha256), which
# ships the llama.cpp source as llama/gitRelease.bundle. The bundle's commit is checked too.
# Layout under $UMA_CACHE_DIR (default ~/.cache/uma-serve):
#   dl/node-llama-cpp-<ver>.tgz   verified tarball
#   llama.cpp-<commit12>/src      source tree (git clone of the bundle)
#   llama.cpp-<commit12>/build    Release CPU build; rebuilt incrementally, never from scratch
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=/dev/null
. "$root/deps/llama.env"
cache=${UMA_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/uma-serve}
home=$cache/llama.cpp-${LLAMA_CPP_COMMIT:0:12}
if [ "${1:-}" = "--print-root" ]; then echo "$home"; exit 0; fi

log() { printf '[llama.sh] %s\n' "$*" >&2; }
tgz=$cache/dl/node-llama-cpp-$NODE_LLAMA_CPP_VERSION.tgz

sha_ok() { [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$NODE_LLAMA_CPP_SHA256" ]; }

fetch_tarball() {
  sha_ok "$tgz" && return 0
  mkdir -p "$cache/dl"
  local tmp; tmp=$(mktemp -d "$cache/dl/tmp.XXXXXX")
  log "fetching node-llama-cpp@$NODE_LLAMA_CPP_VERSION from the npm registry"
  (cd "$tmp" && npm pack --silent "node-llama-cpp@$NODE_LLAMA_CPP_VERSION" >/dev/null)
  if ! sha_ok "$tmp/node-llama-cpp-$NODE_LLAMA_CPP_VERSION.tgz"; then
    log "checksum mismatch for node-llama-cpp@$NODE_LLAMA_CPP_VERSION (want $NODE_LLAMA_CPP_SHA256)"
    rm -rf "$tmp"; exit 1
  fi
  mv "$tmp/node-llama-cpp-$NODE_LLAMA_CPP_VERSION.tgz" "$tgz"
  rm -rf "$tmp"
}

unpack_source() {
  [ -f "$home/src/.uma-verified" ] && return 0
  fetch_tarball
  rm -rf "$home/src" "$home/bundle"
  mkdir -p "$home/bundle"
  tar -xzf "$tgz" -C "$home/bundle" package/llama/gitRelease.bundle
  git clone -q "$home/bundle/package/llama/gitRelease.bundle" "$home/src" 2>/dev/null
  local head; head=$(git -C "$home/src" rev-parse HEAD)
  if [ "$head" != "$LLAMA_CPP_COMMIT" ]; then
    log "bundle holds commit $head, expected $LLAMA_CPP_COMMIT"; exit 1
  fi
  rm -rf "$home/bundle"
  touch "$home/src/.uma-verified"
}

build() {
  local launcher=()
  command -v ccache >/dev/null && launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  # AMX is left out on purpose: on the VMs this project runs on, CPUs advertise AMX that the
  # kernel does not grant (ggml's AMX kernels die with SIGILL/SIGSEGV), and explicit -mno-amx-*
  # wins over -march=native whatever the order.
  local noamx="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
  local args=(-G Ninja -Wno-dev -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DBUILD_SHARED_LIBS=ON
    "-DCMAKE_C_FLAGS=$noamx" "-DCMAKE_CXX_FLAGS=$noamx"
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON
    -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_APP=OFF -DLLAMA_USE_PREBUILT_UI=OFF
    -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF -DGGML_CCACHE=OFF "${launcher[@]}")
  # Reconfigure when the configuration changes (the stamp holds the arguments used).
  if [ ! -f "$home/build/build.ninja" ] || [ "$(cat "$home/build/.uma-config" 2>/dev/null)" != "${args[*]}" ]; then
    log "configuring llama.cpp in $home/build"
    cmake -S "$home/src" -B "$home/build" "${args[@]}" >/dev/null
    printf '%s' "${args[*]}" >"$home/build/.uma-config"
  fi
  local jobs=${UMA_JOBS:-$(nproc)}
  log "building llama.cpp targets: llama llama-bench $* (-j$jobs)"
  # llama.cpp's build prints thousands of compiler warnings; keep them in a log, show them on failure.
  if ! cmake --build "$home/build" -j "$jobs" --target llama llama-bench "$@" >"$home/build.log" 2>&1; then
    grep -E 'error|Error' "$home/build.log" | head -40 >&2
    log "llama.cpp build failed; full log: $home/build.log"; exit 1
  fi
}

unpack_source
build "$@"
log "ready: $home"
