#!/usr/bin/env bash
# Regenerates the llama.cpp references of the synthetic qwen3 and gpt2 models
# (crates/llama/tests/fixtures/synth), with llama.cpp b11312 through llama-cpp-python:
#   pip install llama-cpp-python==0.3.36 gguf numpy   (builds llama.cpp, ~7 min on 2 cores)
# The models themselves are rewritten from their specs (tessera_llama::synth::test_models),
# bit for bit, so only their references and hashes are stored.
set -euo pipefail
cd "$(dirname "$0")/../../.."
root=$(pwd)
out=crates/llama/tests/fixtures/synth
cargo xtask synth-models target/synth
# The models of tessera_llama::synth::test_models (the family models have their own fixtures:
# tools/make_family_refs.py).
models="target/synth/synth-qwen3-q8_0.gguf target/synth/synth-gpt2-f16.gguf"
mkdir -p "$out"
for fa in 1 0; do
  mode=$([ $fa = 1 ] && echo fa-on || echo fa-off)
  python3 tools/make_refs.py "$out/$mode" testdata/refs/prompts.json $models --n 32 --fa $fa
done
# The full logits of both paths into the stored samples (.logits.sample; .logits.f32 deleted).
python3 tools/pack_logits.py "$out"
( cd target/synth && sha256sum synth-qwen3-q8_0.gguf synth-gpt2-f16.gguf ) > "$out/SHA256SUMS"
echo "references in $root/$out"
