#!/usr/bin/env bash
# Installs the test-only npm packages (deps/npm.env) from the npm registry into a per-machine
# cache outside git, once: ~/.cache/uma-serve/npm-openai-<version>-anthropic-<version>/node_modules.
#   scripts/npm_deps.sh            install if missing
#   scripts/npm_deps.sh --print-root
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=deps/npm.env
source "$root/deps/npm.env"
dir="${UMA_CACHE_DIR:-$HOME/.cache/uma-serve}/npm-openai-$OPENAI_NODE_VERSION-anthropic-$ANTHROPIC_SDK_VERSION"
if [ "${1:-}" = "--print-root" ]; then echo "$dir/node_modules"; exit 0; fi
if [ -f "$dir/node_modules/openai/package.json" ] && [ -f "$dir/node_modules/@anthropic-ai/sdk/package.json" ]; then exit 0; fi
command -v npm >/dev/null || { echo "npm is needed for the HTTP test's OpenAI SDK client" >&2; exit 1; }
mkdir -p "$dir"
echo "== fetching openai@$OPENAI_NODE_VERSION and @anthropic-ai/sdk@$ANTHROPIC_SDK_VERSION (npm registry) into $dir" >&2
(cd "$dir" && npm install --silent --no-audit --no-fund --no-save "openai@$OPENAI_NODE_VERSION" \
   "@anthropic-ai/sdk@$ANTHROPIC_SDK_VERSION" >/dev/null)
test -f "$dir/node_modules/openai/package.json" && test -f "$dir/node_modules/@anthropic-ai/sdk/package.json"
