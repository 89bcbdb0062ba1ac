#!/usr/bin/env bash
# Writes the models the tests use (idempotent: uma-mkmodel output is deterministic, so an existing
# file of the right preset is kept). Env: UMA_MKMODEL (the binary), UMA_MODELS_DIR (output folder).
set -euo pipefail
mk=${UMA_MKMODEL:?}
dir=${UMA_MODELS_DIR:?}
mkdir -p "$dir"
[ -s "$dir/oracle.gguf" ] || "$mk" --preset oracle --type f32 --seed 1 -o "$dir/oracle.gguf" >/dev/null
[ -s "$dir/tiny-f16.gguf" ] || "$mk" --preset tiny --type f16 --seed 1 -o "$dir/tiny-f16.gguf" >/dev/null
# The oracle with fill-in-the-middle tokens (byte tokens: <0x01>, <0x02>, <0x03> as PRE, SUF, MID; REP and SEP, which llama.cpp counts as ends of generation, far from what the oracle generates after MID): /infill.
[ -s "$dir/oracle-fim.gguf" ] || "$mk" --preset oracle --type f32 --seed 1 --fim-tokens 4,5,6,250,251 -o "$dir/oracle-fim.gguf" >/dev/null
# A reranker (rank pooling, a classifier head): /rerank.
[ -s "$dir/tiny-rerank-f32.gguf" ] || "$mk" --preset tiny --type f32 --seed 1 --rerank -o "$dir/tiny-rerank-f32.gguf" >/dev/null
# Another vocabulary (no BOS): a gateway tokenizes each catalog model with its own.
[ -s "$dir/tiny-nobos-f16.gguf" ] || "$mk" --preset tiny --type f16 --seed 1 --no-bos -o "$dir/tiny-nobos-f16.gguf" >/dev/null
# The oracle carrying a model family's own chat template (Qwen 2.5's, from the pinned llama.cpp source).
templates=$(cd "$(dirname "${BASH_SOURCE[0]}")" && ./llama.sh --print-root)/src/models/templates
[ -s "$dir/oracle-qwen25-template.gguf" ] || "$mk" --preset oracle --type f32 --seed 1 \
  --chat-template-file "$templates/Qwen-Qwen2.5-7B-Instruct.jinja" -o "$dir/oracle-qwen25-template.gguf" >/dev/null
# The oracle whose chat reply is a tool call it makes unforced (Qwen 2.5's template and syntax): the
# tokens after the generation prompt's last (<0x0A>, 13) made the pieces of a call, then the end of
# the turn; without tools the same reply is text.
[ -s "$dir/oracle-tool-call.gguf" ] || "$mk" --preset oracle --type f32 --seed 1 \
  --chat-template-file "$templates/Qwen-Qwen2.5-7B-Instruct.jinja" --token-text '14=<tool_call>\n' \
  --token-text '15={"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}' \
  --token-text '16=\n</tool_call>' --token-text '17=<|im_end|>' -o "$dir/oracle-tool-call.gguf" >/dev/null
# Another vocabulary altogether (GPT-2's): a draft model that cannot draft for the oracle.
[ -s "$dir/tiny-gpt2-vocab-f16.gguf" ] || "$mk" --preset tiny --type f16 --seed 1 --vocab "$templates/../ggml-vocab-gpt-2.gguf" \
  -o "$dir/tiny-gpt2-vocab-f16.gguf" >/dev/null
# Drafts for the oracle (speculative decoding): the oracle's rule on none, half or all of the tokens.
for a in 0 50 100; do
  [ -s "$dir/oracle-draft-$a.gguf" ] || "$mk" --preset tiny --oracle --agree "$(printf '0.%02d' "$a" | sed 's/0.100/1/')" \
    --type f16 --seed 2 -o "$dir/oracle-draft-$a.gguf" >/dev/null
done
# A vision projector for the tiny model (random LLaVA MLP over a small ViT; libmtmd reads it): images in prompts.
[ -s "$dir/tiny-vision-mmproj.gguf" ] || "$mk" --preset tiny --type f16 --seed 1 -o "$dir/tiny-vision-f16.gguf" \
  --mmproj "$dir/tiny-vision-mmproj.gguf" >/dev/null
echo "test models ready in $dir"
