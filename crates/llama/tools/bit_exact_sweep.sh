#!/usr/bin/env bash
# Compares every intermediate tensor and the logits of Tessera with llama.cpp's, bit for bit, on
# the three real models, both attention paths, and three batch shapes: one batch of prompt + 64
# reference tokens (llama.cpp's tiled kernels), one token after the rest (decode), and 64
# tokens after the prompt (tiled kernels over a filled cache). Needs llama-cpp-python 0.3.36
# (llama.cpp b11312) and the models (`cargo xtask models`); not part of CI. REPACK=1 compares
# with llama.cpp's default repacked weights on both sides (not on an AMX CPU: llama.cpp's
# extra buffers crash there).
#   crates/llama/tools/bit_exact_sweep.sh [REFS_DIR]
set -euo pipefail
cd "$(dirname "$0")/../../.."
refs=${1:-testdata/refs/avx512}
models=${TESSERA_MODELS:-$HOME/.cache/tessera/models}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cargo build -q --release -p tessera-llama --example dump_tensors
for m in smollm2-135m-instruct-q4_1:30 qwen2.5-coder-0.5b-instruct-q4_k_m:24 gemma-3-270m-q4_k_m:18; do
  name=${m%%:*}; n_layer=${m##*:}
  ref="$refs/fa-on/$name/p3-story.json"
  read -r toks n_prompt n_all < <(python3 -c "
import json; r = json.load(open('$ref')); t = r['prompt_tokens'] + r['greedy_tokens'][:64]
print(json.dumps(t, separators=(',', ':')), len(r['prompt_tokens']), len(t))")
  for fa in 0 1; do
    for first in "$n_all" $((n_all - 1)) "$n_prompt"; do
      python3 crates/llama/tools/llama_cpp_dump.py "$models/$name.gguf" "$toks" $fa $first "$tmp/ref.npz" > /dev/null
      rm -rf "$tmp/ours"
      target/release/examples/dump_tensors "$models/$name.gguf" "$toks" $fa $first "$tmp/ours"
      echo "$name fa=$fa batches ${first}+$((n_all - first)): $(python3 crates/llama/tools/compare_dumps.py "$tmp/ref.npz" "$tmp/ours" $n_layer)"
    done
  done
done
