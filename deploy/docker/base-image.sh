#!/usr/bin/env bash
# Builds the Debian 12 base images deploy/docker/Dockerfile and deploy/compose.yaml name, from Debian
# packages (mmdebstrap) straight into the local Docker image store (docker import): no image
# registry is needed, only a Debian mirror (or a local copy of one).
#   deploy/docker/base-image.sh              uma-serve/build:bookworm-cpu, uma-serve/runtime:bookworm-cpu,
#                                            uma-serve/ops:bookworm
#   deploy/docker/base-image.sh --cuda 12-4  also uma-serve/build:bookworm-cuda and
#                                            uma-serve/runtime:bookworm-cuda from NVIDIA's Debian 12 repository
#   deploy/docker/base-image.sh --only ops   one of build, runtime, ops
# Env: UMA_DEBIAN_MIRROR (http://deb.debian.org/debian), UMA_DEBIAN_SECURITY
#      (http://deb.debian.org/debian-security), UMA_IMAGE_REPO (uma-serve),
#      UMA_CUDA_REPO (NVIDIA's debian12/x86_64 repository), UMA_CUDA_KEYRING (its signing key, a
#      .gpg file: needed with --cuda), SOURCE_DATE_EPOCH (mmdebstrap then writes the same bytes).
# Needs root (or unshare rights), mmdebstrap and docker.
set -euo pipefail
repo=${UMA_IMAGE_REPO:-uma-serve}
mirror=${UMA_DEBIAN_MIRROR:-http://deb.debian.org/debian}
security=${UMA_DEBIAN_SECURITY:-http://deb.debian.org/debian-security}
cuda=""
only=""
while [ $# -gt 0 ]; do
  case "$1" in
    --cuda) cuda=${2:?--cuda VERSION, e.g. 12-4}; shift 2 ;;
    --only) only=${2:?--only build|runtime|ops}; shift 2 ;;
    *) echo "usage: $0 [--cuda VERSION] [--only build|runtime|ops]" >&2; exit 2 ;;
  esac
done
log() { printf '[base-image] %s\n' "$*" >&2; }
for tool in mmdebstrap docker; do
  command -v "$tool" >/dev/null || { log "needs $tool (Debian: apt-get install $tool)"; exit 1; }
done

# The build stage runs scripts/setup.sh --from-bundle, which wants a compiler, cmake, ninja, xz and
# python3, and finds every library the project links installed here (the bundle then only brings
# the llama.cpp source). libcurl: the model store's remote tier.
build_pkgs=(build-essential cmake ninja-build xz-utils python3 ca-certificates
  libboost1.81-dev nlohmann-json3-dev libcli11-dev libspdlog-dev libhiredis-dev
  libssl-dev libcurl4-openssl-dev liburing-dev)
# What the binaries and llama.cpp's libraries load at run time, and nothing else.
runtime_pkgs=(libstdc++6 libgomp1 libspdlog1.10 libfmt9 libhiredis0.14 libssl3 libcurl4 liburing2 ca-certificates)
# Compose's other services, from Debian too: Redis, nginx, Prometheus, and python3 for the
# Prometheus target list of the agents' models (deploy/compose/model-targets.py).
ops_pkgs=(redis-server redis-tools nginx-light prometheus python3 ca-certificates)
# NVIDIA's packages, version-suffixed (VERSION 12-4: CUDA 12.4).
cuda_build_pkgs=(cuda-nvcc-VER cuda-cudart-dev-VER cuda-driver-dev-VER cuda-cccl-VER libcublas-dev-VER)
cuda_runtime_pkgs=(cuda-cudart-VER libcublas-VER)

sources=("deb $mirror bookworm main" "deb $mirror bookworm-updates main" "deb $security bookworm-security main")

# $1 tag, $2 variant, $3 comma-separated packages, then extra mmdebstrap arguments.
build_image() {
  local tag=$1 variant=$2 pkgs=$3
  shift 3
  log "$tag ($variant): $pkgs"
  # Docs, man pages and translations left out: nothing in a container reads them.
  mmdebstrap --mode=auto --variant="$variant" --format=tar --include="$pkgs" \
    --aptopt='Acquire::Languages "none"' \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    "$@" bookworm - "${sources[@]}" |
    docker import --change 'ENV LANG=C.UTF-8' --change 'CMD ["/bin/bash"]' - "$tag" >/dev/null
  log "$tag: $(docker image inspect -f '{{.Size}}' "$tag" | awk '{printf "%.0f MiB", $1 / 1048576}')"
}

join() { local IFS=,; echo "$*"; }

cuda_args=()
if [ -n "$cuda" ]; then
  : "${UMA_CUDA_KEYRING:?--cuda needs UMA_CUDA_KEYRING, the key of the NVIDIA repository (cuda-archive-keyring.gpg)}"
  cuda_repo=${UMA_CUDA_REPO:-https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/}
  # The key is seen by mmdebstrap's apt only; the repository's line is taken out of the image again.
  cuda_args=(--keyring="$UMA_CUDA_KEYRING"
    --customize-hook="f=\"\$1/etc/apt/sources.list\"; [ ! -f \"\$f\" ] || sed -i '\\|$cuda_repo|d' \"\$f\"")
fi
with_cuda() { local sources=("${sources[@]}" "deb $cuda_repo /"); build_image "$@" "${cuda_args[@]}"; }

if [ -z "$only" ] || [ "$only" = build ]; then
  build_image "$repo/build:bookworm-cpu" minbase "$(join "${build_pkgs[@]}")"
  [ -z "$cuda" ] || with_cuda "$repo/build:bookworm-cuda" minbase "$(join "${build_pkgs[@]}" "${cuda_build_pkgs[@]//VER/$cuda}")"
fi
if [ -z "$only" ] || [ "$only" = runtime ]; then
  build_image "$repo/runtime:bookworm-cpu" essential "$(join "${runtime_pkgs[@]}")"
  [ -z "$cuda" ] || with_cuda "$repo/runtime:bookworm-cuda" essential "$(join "${runtime_pkgs[@]}" "${cuda_runtime_pkgs[@]//VER/$cuda}")"
fi
if [ -z "$only" ] || [ "$only" = ops ]; then
  # The ops services run as uid 10001 too, with their data folders owned by it: a fresh named
  # volume takes the ownership of the folder it is mounted on. ($1 is the hook's: the new root.)
  # shellcheck disable=SC2016
  build_image "$repo/ops:bookworm" essential "$(join "${ops_pkgs[@]}")" \
    --customize-hook='echo "uma:x:10001:10001:uma-serve:/nonexistent:/usr/sbin/nologin" >>"$1/etc/passwd"' \
    --customize-hook='echo "uma:x:10001:" >>"$1/etc/group"' \
    --customize-hook='mkdir -p "$1/data" "$1/prometheus" "$1/sd" && chown 10001:10001 "$1/data" "$1/prometheus" "$1/sd"'
fi
