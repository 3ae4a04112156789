#!/usr/bin/env bash
# Makes one set of llama.cpp references (testdata/refs/LEVEL) from a llama.cpp build for that
# SIMD level, and the spread files that say how far that build is from the other sets.
#
#   tools/make_ref_set.sh LEVEL VENV [repack]     LEVEL: avx2 | avx512
#
# With `repack`, llama.cpp keeps its default repacked weights (Q4_0/Q4_K/IQ4_NL interleaved at
# load) and the set goes to testdata/refs/LEVEL-repack (never on a CPU with AMX: llama.cpp's
# AMX path crashes there).
#
# Each level is a separate build of llama-cpp-python 0.3.36 (llama.cpp b11312) from source,
# with explicit flags and no -march=native, so that the set is what llama.cpp computes on every
# CPU of that level (a native build also enables what the build machine happens to have):
#
#   avx2:   -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
#           -DGGML_BMI2=ON -DGGML_AVX512=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX_VNNI=OFF
#   avx512: the avx2 flags with -DGGML_AVX512=ON -DGGML_AVX512_VBMI=ON -DGGML_AVX512_VNNI=ON
#           (runs only on an AVX-512 VNNI CPU). The stored avx512 set predates this script:
#           a native build on a Sapphire Rapids (testdata/refs/avx512/build.json).
#
# Build once per machine, outside CI (about 20 minutes on 2 cores), into a virtual environment:
#   python3 -m venv VENV && VENV/bin/pip install numpy==2.4.6 gguf==0.19.0
#   CMAKE_ARGS="<flags above> -DLLAVA_BUILD=OFF" VENV/bin/pip wheel --no-deps -w WHEELS \
#       llama-cpp-python==0.3.36 --no-binary llama-cpp-python
#   VENV/bin/pip install WHEELS/llama_cpp_python-0.3.36-*.whl
#
# Without `repack`, weights stay in plain buffers (use_extra_bufts = False, as llama-bench
# --repack 0). Needs the models (`cargo xtask models`).
set -euo pipefail
cd "$(dirname "$0")/.."
level=${1:?usage: tools/make_ref_set.sh avx2|avx512 VENV}
venv=${2:?usage: tools/make_ref_set.sh avx2|avx512 VENV (a virtual environment with that build)}
py="$venv/bin/python"
models_dir=${TESSERA_MODELS:-$HOME/.cache/tessera/models}
models=(
  "$models_dir/smollm2-135m-instruct-q4_1.gguf"
  "$models_dir/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
  "$models_dir/gemma-3-270m-q4_k_m.gguf"
)
"$py" -c 'import llama_cpp; print(llama_cpp.llama_print_system_info().decode())'
out=testdata/refs/$level
if [ "${3:-}" = repack ]; then
  export REPACK=1
  out=testdata/refs/$level-repack
fi
mkdir -p "$out"
# 1. The references, both attention paths.
"$py" tools/make_refs.py "$out/fa-on" testdata/refs/prompts.json "${models[@]}" --fa 1
"$py" tools/make_refs.py "$out/fa-off" testdata/refs/prompts.json "${models[@]}" --fa 0
# The full logits of both paths into the stored samples (.logits.sample; .logits.f32 deleted).
"$py" tools/pack_logits.py "$out"
# 2. llama.cpp's other attention path against them (the teacher-forced allowance).
"$py" crates/llama/tools/llama_cpp_self_agreement.py "$out" "$out/self_agreement.json" "${models[@]}"
# 3. This build against every other set: its spread file there (plain builds only).
[ "${REPACK:-0}" = 1 ] && { echo "write $out/build.json, then: cargo xtask testdata sums"; exit 0; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for other in testdata/refs/*/build.json; do
  dir=$(dirname "$other")
  [ "$dir" = "$out" ] && continue
  grep -q '"repack": true' "$other" && continue
  mkdir -p "$dir/spread"
  "$py" crates/llama/tools/llama_cpp_self_agreement.py "$dir" "$tmp/other.json" \
    --reproduction "$dir/spread/$level-explicit.json" "${models[@]}"
done
echo "write $out/build.json (see the others), then: cargo xtask testdata sums"
