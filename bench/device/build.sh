#!/usr/bin/env bash
# Builds, on a GPU machine from scripts/bundle.sh's offline bundle, what bench/device/ab.sh runs:
# llama.cpp with CUDA and our patches (deps/llama-patches/), umad and its tools; then, when a patch
# is named, llama.cpp's libraries again without that one patch, so one run can compare both.
#   bench/device/build.sh BUNDLE_DIR [PATCH]      (PATCH: a file name in deps/llama-patches/)
# Leaves build-cuda/ab/with/ and build-cuda/ab/without/ (llama.cpp's shared libraries of each
# build; a process picks one with LD_LIBRARY_PATH); the build tree itself ends up without PATCH.
# Once a machine: the source is patched in place. Logs go to $OUT when set.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
export UMA_BUNDLE; UMA_BUNDLE=$(cd "${1:?usage: bench/device/build.sh BUNDLE_DIR [PATCH]}" && pwd)
patch=${2:-}
export UMA_GPU=cuda UMA_ALLOW_SKIP_REMOTE=1
for d in /usr/local/cuda/bin /opt/torch/.venv/bin; do [ -d "$d" ] && PATH=$PATH:$d; done
logs=${OUT:-build-cuda}
mkdir -p "$logs" build-cuda
t0=$(date +%s)
targets=(llama-server llama-batched-bench)
scripts/setup.sh "${targets[@]}" >"$logs/setup.log" 2>&1 || { tail -20 "$logs/setup.log"; exit 1; }
echo "setup (llama.cpp with CUDA): $(( $(date +%s) - t0 )) s"
cmake -S . -B build-cuda -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DUMA_BUILD_TESTS=OFF >/dev/null
cmake --build build-cuda -j "$(nproc)" --target umad uma-bench uma-mkmodel uma-cli uma-load-bench uma-store \
  >"$logs/build.log" 2>&1 || { grep -E 'error' "$logs/build.log" | head -20; exit 1; }
echo "setup + project: $(( $(date +%s) - t0 )) s"
home=$(scripts/llama.sh --print-root)
keep() { rm -rf "build-cuda/ab/$1"; mkdir -p "build-cuda/ab/$1"; cp -a "$home"/build/bin/*.so* "build-cuda/ab/$1/"; }
keep with
# UMA_DEVICE_MAKE_8B=1: bench/device/ab.sh's 8B model is made in the background meanwhile.
m8=build-cuda/models/8b-q4_0.gguf
if [ "${UMA_DEVICE_MAKE_8B:-0}" = 1 ] && [ ! -s "$m8" ]; then
  mkdir -p build-cuda/models; touch "$m8.making"
  LD_LIBRARY_PATH=$root/build-cuda/ab/with setsid nohup bash -c "build-cuda/bin/uma-mkmodel --preset 8b --type q4_0 --seed 1 \
    -o $m8.tmp >/dev/null 2>&1 && mv $m8.tmp $m8; rm -f $m8.making" >/dev/null 2>&1 &
fi
if [ -n "$patch" ]; then
  p=$root/deps/llama-patches/$patch
  [ -f "$p" ] || { echo "no $p"; exit 2; }
  (cd "$home/src" && GIT_DIR=/nonexistent git apply --reverse "$p")
  cmake --build "$home/build" -j "$(nproc)" --target llama llama-common mtmd "${targets[@]}" >"$logs/rebuild.log" 2>&1 ||
    { grep -E 'error' "$logs/rebuild.log" | head -20; exit 1; }
  keep without
  echo "without $patch: $(( $(date +%s) - t0 )) s"
fi
