#!/usr/bin/env bash
# Fetches, verifies and builds the pinned llama.cpp into a per-machine cache outside git.
#
#   scripts/llama.sh [TARGET...]            build libllama, libllama-common and any extra llama.cpp targets
#                                           (llama-bench, llama-server, ...: the benchmarks name what they run)
#   scripts/llama.sh --from-bundle DIR [TARGET...]   the same from an offline bundle (scripts/bundle.sh)
#   scripts/llama.sh --print-root           print the cache folder the project's CMake reads
#   scripts/llama.sh --print-prefix         print where a bundle's Debian packages were unpacked ("" if none)
#   scripts/llama.sh --source-only          fetch and verify the source, build nothing
#   scripts/llama.sh --source-tar           write the pruned source tar to stdout (scripts/bundle.sh)
#
# Source: the npm registry package node-llama-cpp (deps/llama.env pins version and sha256), which
# ships the llama.cpp source as llama/gitRelease.bundle. The bundle's commit is checked too. An
# offline bundle carries the same source pruned (no docs, sample models or web-UI sources) as a
# byte-reproducible tar whose sha256 deps/llama.env pins as well.
# Env: UMA_GPU=cuda builds with CUDA (UMA_CUDA_ARCHITECTURES, default 90: Hopper) into a folder of
# its own; UMA_CACHE_DIR moves the cache.
# Layout under $UMA_CACHE_DIR (default ~/.cache/uma-serve):
#   dl/node-llama-cpp-<ver>.tgz     verified tarball
#   llama.cpp-<commit12>/src        source tree (git clone of the bundle, or the offline bundle's tar)
#   llama.cpp-<commit12>/build      Release CPU build; rebuilt incrementally, never from scratch
#   llama.cpp-<commit12>-cuda/      the CUDA build (src: a link to the CPU folder's source)
#   deps-prefix/                    Debian packages unpacked by setup.sh --from-bundle
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=/dev/null
. "$root/deps/llama.env"
cache=${UMA_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/uma-serve}
base=$cache/llama.cpp-${LLAMA_CPP_COMMIT:0:12}
gpu=${UMA_GPU:-}
case "$gpu" in
  "" | cpu) gpu=""; home=$base ;;
  cuda) home=$base-cuda ;;
  *) echo "UMA_GPU must be empty, cpu or cuda (got '$gpu')" >&2; exit 2 ;;
esac
case "${1:-}" in
  --print-root) echo "$home"; exit 0 ;;
  --print-prefix) [ -d "$cache/deps-prefix/usr" ] && echo "$cache/deps-prefix"; exit 0 ;;
esac

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

# The files of the pruned source in git checkout $1, sorted (what a build and the tests need).
pruned_files() {
  (cd "$1" && git ls-files | grep -vE '^(docs/|benches/|media/|\.github/|tools/ui/(src|tests|\.storybook)/|models/)'
   cd "$1" && git ls-files models/templates && printf "%s\n" models/ggml-vocab-llama-spm.gguf models/ggml-vocab-gpt-2.gguf) | LC_ALL=C sort
}

# A tar of those files that is the same bytes on any machine (names sorted, times, owners and
# group/other write bits fixed), so its sha256 can be pinned. Taken from a clean checkout of the
# commit: the build's source carries our patches.
source_tar() {
  local tmp; tmp=$(mktemp -d)
  git clone -q "$base/src" "$tmp/src" 2>/dev/null
  pruned_files "$tmp/src" | tar -C "$tmp/src" --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner --format=gnu \
    --mode=go-w --no-recursion -cf - -T -
  rm -rf "$tmp"
}

# Our patches to the pinned source (deps/llama-patches/, in name order; deps/llama.env pins their
# sha256), applied once to the verified source. Another patch set starts again from the verified
# source; a patch that does not apply leaves the source to be unpacked again next time.
patches_sum() { cat "$root"/deps/llama-patches/*.patch | sha256sum | cut -d' ' -f1; }
apply_patches() {
  local want; want=$(patches_sum)
  if [ "$want" != "$LLAMA_PATCHES_SHA256" ]; then
    log "deps/llama-patches/ hold $want, deps/llama.env pins $LLAMA_PATCHES_SHA256"; exit 1
  fi
  [ "$(cat "$base/src/.uma-patches" 2>/dev/null)" = "$want" ] && return 0
  if [ -f "$base/src/.uma-patches" ]; then
    rm -f "$base/src/.uma-verified"
    unpack_source
  fi
  local p
  for p in "$root"/deps/llama-patches/*.patch; do
    # GIT_DIR: as a plain patch tool (inside another work tree git apply skips paths silently);
    # the reverse check proves the patch is in.
    if ! (cd "$base/src" && GIT_DIR=/nonexistent git apply --whitespace=nowarn "$p" &&
          GIT_DIR=/nonexistent git apply --reverse --check "$p"); then
      rm -f "$base/src/.uma-verified"
      log "$p does not apply to the pinned source"; exit 1
    fi
    log "applied $(basename "$p")"
  done
  echo "$want" >"$base/src/.uma-patches"
}

unpack_source() {
  [ -f "$base/src/.uma-verified" ] && return 0
  rm -rf "$base/src"
  if [ -n "$bundle" ]; then
    local sum
    sum=$(xz -dc "$bundle/llama-src.tar.xz" | sha256sum | cut -d' ' -f1)
    if [ "$sum" != "$LLAMA_SRC_TAR_SHA256" ]; then
      log "$bundle/llama-src.tar.xz holds $sum, deps/llama.env pins $LLAMA_SRC_TAR_SHA256"; exit 1
    fi
    mkdir -p "$base/src"
    xz -dc "$bundle/llama-src.tar.xz" | tar -C "$base/src" -xf -
    echo "offline bundle, tar sha256 $sum" >"$base/src/.uma-verified"
    return 0
  fi
  fetch_tarball
  rm -rf "$base/bundle"
  mkdir -p "$base/bundle"
  tar -xzf "$tgz" -C "$base/bundle" package/llama/gitRelease.bundle
  git clone -q "$base/bundle/package/llama/gitRelease.bundle" "$base/src" 2>/dev/null
  local head; head=$(git -C "$base/src" rev-parse HEAD)
  if [ "$head" != "$LLAMA_CPP_COMMIT" ]; then
    log "bundle holds commit $head, expected $LLAMA_CPP_COMMIT"; exit 1
  fi
  rm -rf "$base/bundle"
  echo "npm node-llama-cpp@$NODE_LLAMA_CPP_VERSION, commit $head" >"$base/src/.uma-verified"
}

build() {
  local launcher=()
  command -v ccache >/dev/null && launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  # AMX is left out on purpose: on the VMs this project runs on, CPUs advertise AMX that the
  # kernel does not grant (ggml's AMX kernels die with SIGILL/SIGSEGV), and explicit -mno-amx-*
  # wins over -march=native whatever the order.
  local noamx="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
  # llama.cpp's common library in unity batches (the file says why); copied beside the build so the
  # configuration does not name the checkout that ran setup first.
  mkdir -p "$home"
  cmp -s "$root/cmake/llama_unity.cmake" "$home/llama_unity.cmake" || cp "$root/cmake/llama_unity.cmake" "$home/llama_unity.cmake"
  local args=(-G Ninja -Wno-dev -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DBUILD_SHARED_LIBS=ON
    "-DCMAKE_PROJECT_INCLUDE=$home/llama_unity.cmake"
    "-DCMAKE_C_FLAGS=$noamx" "-DCMAKE_CXX_FLAGS=$noamx"
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON
    -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_APP=OFF -DLLAMA_USE_PREBUILT_UI=OFF
    -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF -DGGML_CCACHE=OFF "${launcher[@]}")
  if [ "$gpu" = cuda ]; then
    local nvcc; nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
    [ -x "$nvcc" ] || { log "UMA_GPU=cuda: no nvcc on PATH or in /usr/local/cuda/bin"; exit 1; }
    args+=(-DGGML_CUDA=ON "-DCMAKE_CUDA_ARCHITECTURES=${UMA_CUDA_ARCHITECTURES:-90}" "-DCMAKE_CUDA_COMPILER=$nvcc")
    mkdir -p "$home"
    ln -sfn "$base/src" "$home/src"
  fi
  # Reconfigure when the configuration changes (the stamp holds the arguments used).
  if [ ! -f "$home/build/build.ninja" ] || [ "$(cat "$home/build/.uma-config" 2>/dev/null)" != "${args[*]}" ]; then
    log "configuring llama.cpp in $home/build"
    cmake -S "$base/src" -B "$home/build" "${args[@]}" >/dev/null
    printf '%s' "${args[*]}" >"$home/build/.uma-config"
  fi
  local jobs=${UMA_JOBS:-$(nproc)}
  log "building llama.cpp targets: llama llama-common mtmd $* (-j$jobs${gpu:+, $gpu})"
  # llama.cpp's build prints thousands of compiler warnings; keep them in a log, show them on failure.
  if ! cmake --build "$home/build" -j "$jobs" --target llama llama-common mtmd "$@" >"$home/build.log" 2>&1; then
    grep -E 'error|Error' "$home/build.log" | head -40 >&2
    log "llama.cpp build failed; full log: $home/build.log"; exit 1
  fi
}

bundle=""
case "${1:-}" in
  --from-bundle) bundle=$(cd "${2:?--from-bundle DIR}" && pwd); shift 2 ;;
  --source-only) unpack_source; exit 0 ;;
  --source-tar)
    unpack_source
    [ -d "$base/src/.git" ] || { log "--source-tar needs the git source (from npm), not a bundle's"; exit 1; }
    source_tar; exit 0 ;;
esac
unpack_source
apply_patches
build "$@"
log "ready: $home"
