#!/usr/bin/env bash
# Every GPU check of a session in one run on the lent GPU machine (no Rust there): the CUDA
# tests, the CUDA test matrix, Tessera's CUDA against Tessera's CPU on random-weight Llama-3
# files (KL divergence, greedy text) and llama.cpp b11312 beside it on the same files (its own
# CUDA-vs-CPU divergence, llama-bench), written under $OUT (default ./gpu-out).
#
# Needs, in the working tree copied there: .gpu/ (`cargo xtask gpu-bundle`) and gpu-ref/ (a copy
# of the project's GPU material: llama.cpp's pruned source, the gguf wheel, make_random_llama.py).
# Run: bash .gpu/check.sh [quick]  (each step has its own time limit; a failed step is reported
# and the rest go on, so one run gives the whole picture). `quick`: no benchmarks, one type less.
# `profile`: only the 1B Q4_0 file, then compute-sanitizer's memcheck and ncu's per-kernel
# summary (a second call: the whole check leaves no time for them). `serve`: only the 1B Q4_0
# file, then `tessera serve -ngl 99 --parallel 16` and `llama-server -ngl 99 -np 16` under 1, 4
# and 16 streaming clients (tools/serve_bench.py; llama.cpp is built first if an earlier call on
# this machine did not). `8b`: Llama-3.1-8B-shaped random files (F16, Q4_0, Q4_K_M, Q8_0),
# tessera bench and llama-bench on each, and Q4_0 at depths 4096 and 16384. `triage` (the
# first call of a session that brings new kernels; about 8 minutes, TRIAGE_S): the test matrix
# by op family beside the generic kernels, the 1B files' KLD with and without the fast paths,
# greedy text, benches, the host's step timings, ncu's device time per kernel of a decoded
# token, llama-bench if its build finished. `verify` (a second call after fixes; VERIFY_S): the
# 1B Q4_0 KLD, greedy text, timings, ncu, then Q4_K_M and the random MoE files.
# Everything lands in four files under $OUT (report.md, all-logs.txt, test-matrix.log,
# ncu-summary.txt): the device tool returns only a few files.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
R=$OUT/report.md
B=$PWD/.gpu
T=/tmp/tessera-gpu
L=$T/logs
QUICK=${1:-}
mkdir -p $T $L
export REQUIRE_CUDA=1 REQUIRE_NVRTC=1 TESSERA_CUDA_CACHE=$T/cubin
step() { echo "## $1" | tee -a "$R"; }
run() { # run LIMIT LOGNAME CMD...: logs to $OUT/LOGNAME.log, tail into the report
    local limit=$1 name=$2; shift 2
    local t0=$(date +%s)
    timeout "$limit" "$@" > "$L/$name.log" 2>&1
    local rc=$?
    echo "\`$*\` -> rc $rc in $(( $(date +%s) - t0 ))s" >> "$R"
    { echo "===== $name: $* (rc $rc)"; cat "$L/$name.log"; } >> "$OUT/all-logs.txt"
    return $rc
}
# greedy_pair NAME FILE N: N greedy tokens on the CPU alone and with -ngl 99, the texts compared
# (what precedes the timing lines).
greedy_pair() {
  local name=$1 f=$2 n=$3
  run 120 "run-cpu-$name" "$B/tessera" run -m "$f" -p "The capital of France is" -n "$n" --temp 0 --device none
  run 120 "run-cuda-$name" "$B/tessera" run -m "$f" -p "The capital of France is" -n "$n" --temp 0 -ngl 99
  if cmp -s <(sed '/load time/,$d' "$L/run-cpu-$name.log") <(sed '/load time/,$d' "$L/run-cuda-$name.log"); then
    echo "$name: same text" >> "$R"
  else
    echo "$name: texts differ (see logs)" >> "$R"
  fi
}
# spec_trio TAG TARGET DRAFT: 256 greedy tokens of TARGET with -ngl 99 plain, with DRAFT as its
# draft model, and with n-gram lookup; their eval and draft lines in the report.
spec_trio() {
  local tag=$1 f=$2 draft=$3
  local sp=(run -m "$f" -p "The capital of France is" -n 256 --temp 0 --ignore-eos -ngl 99 -no-cnv)
  run 150 "spec-$tag-plain" "$B/tessera" "${sp[@]}"
  run 150 "spec-$tag-draft" "$B/tessera" "${sp[@]}" -md "$draft" -ngld 99 --spec-draft-n-max 8
  run 150 "spec-$tag-ngram" "$B/tessera" "${sp[@]}" --spec-type ngram-simple
  for v in plain draft ngram; do
    echo "$tag $v: $(grep -E "^ +eval time|draft" "$L/spec-$tag-$v.log" | tr -s ' ' | tr '\n' ' ')" >> "$R"
  done
}
# Parts of real models sent over earlier calls (tools/gpu/parts.sh): stored under /tmp; with
# `parts` nothing else is done.
if [ -d gpu-parts ]; then mkdir -p $T/parts && cp gpu-parts/* $T/parts/; fi
if [ "$QUICK" = parts ]; then ls -la $T/parts > "$OUT/parts.txt"; exit 0; fi
mkdir -p $T/real
for sum in $T/parts/*.sha256; do
  [ -f "$sum" ] || continue
  name=$(awk '{print $2}' "$sum")
  [ -f "$T/real/$name" ] && continue
  cat $T/parts/$name.part* > "$T/real/$name.tmp" 2>/dev/null
  if [ "$(sha256sum "$T/real/$name.tmp" | awk '{print $1}')" = "$(awk '{print $1}' "$sum")" ]; then
    mv "$T/real/$name.tmp" "$T/real/$name"
  else
    rm -f "$T/real/$name.tmp"
  fi
done
echo "# GPU check $(date -u +%FT%TZ)" > "$R"
ls $T/real/*.gguf >> "$R" 2>/dev/null
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv >> "$R" 2>&1
lscpu | grep -m1 "Model name" >> "$R"

# llama.cpp b11312 in the background (about 4 minutes on 16 cores), below Tessera's priority.
LC=/tmp/b/bin
if [ ! -x $LC/llama-server ] && [ -f gpu-ref/llama.cpp-b11312-src-pruned.tar.xz ] && [ "$QUICK" != profile ] && [ "$QUICK" != verify ]; then
  mkdir -p /tmp/src && tar xJf gpu-ref/llama.cpp-b11312-src-pruned.tar.xz -C /tmp/src
  ( cd /tmp/src/lc && nice -n 19 cmake -B /tmp/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
      -DCMAKE_CUDA_ARCHITECTURES=90 -DBUILD_SHARED_LIBS=ON -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
      -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF \
      -DLLAMA_USE_PREBUILT_UI=OFF -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
      -DGGML_BMI2=ON && nice -n 19 cmake --build /tmp/b -j 16 \
      --target llama-bench llama-quantize llama-perplexity llama-server ) > "$L/llama-build.log" 2>&1 &
  BUILD=$!
fi

# budget SECONDS: the clock of a timed mode (left: seconds left; late N WHAT: whether fewer
# than N are left, noting WHAT as skipped), the gguf package, the Llama-3 vocabulary and the
# text the KLD runs read.
budget() {
  T0=$(date +%s); LIMIT=$1
  python3 -m pip install -q --no-index --no-deps --target $T/site gpu-ref/gguf-*.whl >> "$L/pip.log" 2>&1
  gunzip -c testdata/vocab/ggml-vocab-llama-bpe.gguf.gz > $T/vocab.gguf
  TEXT=$T/text.txt; cat README.md docs/ARCHITECTURE.md > $TEXT
}
left() { echo $(( LIMIT - ($(date +%s) - T0) )); }
late() { [ "$(left)" -lt "$1" ] && echo "skipped (time): $2" >> "$R"; }
# kld_pair TAG FILE C CHUNKS [TESSERA_CUDA_PATHS...]: the CPU base, then CUDA per paths setting,
# each run's KLD, the plans its graphs took and the windows fused in the report. KLD_EXTRA:
# more perplexity flags for both sides (`-ub 1`: every token a decoding step, so the decode
# kernels and windows are what is compared; the CPU base then takes its one-row kernels too).
kld_pair() {
  local tag=$1 m=$2 c=$3 k=$4; shift 4
  local extra=(${KLD_EXTRA:-})
  run 60 "ppl-cpu-$tag" "$B/tessera" perplexity -m $m -f $TEXT -c $c --chunks $k --device none "${extra[@]}" --kl-divergence-base $T/base-$tag.kld
  for paths in "$@"; do
    late 30 "kld $tag $paths" && return
    run 60 "kld-$tag$paths" env TESSERA_CUDA_PATHS=$paths RUST_LOG=tessera_backend_cuda=debug "$B/tessera" perplexity -m $m -c $c --chunks $k -ngl 99 "${extra[@]}" --kl-divergence-base $T/base-$tag.kld --kl-divergence
    echo "$tag TESSERA_CUDA_PATHS=$paths: $(grep -iE "mean +kld|same top|error|panick" "$L/kld-$tag$paths.log" | head -3 | tr -s ' ' | tr '\n' ' ')" >> "$R"
    grep -oE "(plan|fused windows): .*" "$L/kld-$tag$paths.log" | sort -u | head -4 >> "$R"
  done
}
# step_timings FILE: the host's trace timings of a few decoded tokens (step, split, graph).
step_timings() {
  RUST_LOG=tessera_backend_cuda=trace,tessera_sched=trace,tessera_llama=trace run 60 trace-run "$B/tessera" run -m $1 -p "The capital of France is" -n 12 --temp 0 -ngl 99 -no-cnv
  grep -E "step:|split:|final wait|graph:" "$L/trace-run.log" | tail -12 | sed -E 's/^[0-9T:.-]+Z +//' >> "$R"
}
# ncu_decode FILE LIMIT: ncu's device time per kernel of one decoded token (graphs off: each
# kernel its own launch), into ncu-summary.txt.
ncu_decode() {
  command -v ncu > /dev/null || return
  run "$2" ncu env TESSERA_CUDA_PATHS=-graphs ncu --clock-control none --metrics gpu__time_duration.sum --launch-skip 600 --launch-count 300 --print-summary per-kernel "$B/tessera" run -m $1 -p "The capital of France is" -n 6 --temp 0 -ngl 99 -no-cnv
  grep -vE "^==PROF==" "$L/ncu.log" | grep -E "^  [a-z_0-9]+ \(|gpu__time_duration" > "$OUT/ncu-summary.txt"
}

if [ "$QUICK" = verify ]; then
  # A second call after fixes from a triage run (about 5 minutes): the 1B Q4_0 file's KLD
  # against the CPU (prompt batches: cuBLAS and MMQ), greedy text, where a decoded token's time
  # goes (the host's trace timings per step, split and graph; ncu's device time per kernel over
  # a window of decode launches, graphs off so each kernel is its own launch), the bench, then
  # Q4_K_M and the random MoE files while time is left (VERIFY_S, default 290).
  budget "${VERIFY_S:-290}"
  mkdir -p $T/vocab && gunzip -c testdata/vocab/ggml-vocab-qwen2.gguf.gz > $T/vocab/ggml-vocab-qwen2.gguf
  run 60 write-synth "$B/write_synth" $T/synth $T/vocab synth-qwen3moe-f16 synth-gpt-oss-f16 &
  PYTHONPATH=$T/site run 150 make-1b python3 gpu-ref/make_random_llama.py 1b $T/vocab.gguf $T/1b-f16.gguf
  wait
  run 60 quantize-Q4_0 "$B/tessera" quantize $T/1b-f16.gguf $T/1b-Q4_0.gguf Q4_0
  step "1B Q4_0: KLD against the CPU, greedy text ($(left)s left)"
  f=$T/1b-Q4_0.gguf
  kld_pair Q4_0-c256 $f 256 4 all -fused
  kld_pair Q4_0-c64 $f 64 8 all
  KLD_EXTRA="-ub 1" kld_pair Q4_0-dec $f 64 2 all -fused
  greedy_pair Q4_0 $f 24
  step "where a decoded token's time goes ($(left)s left)"
  step_timings $f
  run 60 bench-Q4_0 "$B/tessera" bench -m $f -ngl 99 -p 512 -n 128 -r 3
  grep "|" "$L/bench-Q4_0.log" | tail -2 >> "$R"
  late 70 ncu || ncu_decode $f 60
  step "Q4_K_M and the random MoE files ($(left)s left)"
  if ! late 60 Q4_K_M; then
    run 60 quantize-Q4_K_M "$B/tessera" quantize $T/1b-f16.gguf $T/1b-Q4_K_M.gguf Q4_K_M
    kld_pair Q4_K_M-c64 $T/1b-Q4_K_M.gguf 64 8 all
  fi
  for pair in "synth-qwen3moe-f16 Q4_K_M" "synth-gpt-oss-f16 MXFP4_MOE"; do
    set -- $pair
    late 30 "$1" && break
    m=$T/synth/$1-$2.gguf
    run 60 "quantize-$1" "$B/tessera" quantize $T/synth/$1.gguf $m $2
    kld_pair $1 $m 256 4 all
  done
  echo "done $(date -u +%FT%TZ) after $(( $(date +%s) - T0 ))s" >> "$R"
  exit 0
fi

if [ "$QUICK" = triage ]; then
  # The first run of the fast paths on a GPU, in one call of at most about 8 minutes: the test
  # matrix split by op family (a kernel that breaks the CUDA context spoils only its own
  # family's run) beside the generic kernels alone, the device tests, then the 1B files: KLD
  # against the CPU with and without the fast paths, greedy text, the plans taken, benches, and
  # llama.cpp's bench if its build (started above) finished in time. Steps are skipped once
  # TRIAGE_S seconds (default 480) have passed, so the report always comes back.
  budget "${TRIAGE_S:-480}"
  ( PYTHONPATH=$T/site timeout 150 python3 gpu-ref/make_random_llama.py 1b $T/vocab.gguf $T/1b-f16.gguf > "$L/make-1b.log" 2>&1 ) &
  MAKE=$!
  step "CUDA test matrix by op family (fast paths), and the generic kernels alone"
  FAMS=("^(mul_mat|mul_mat_group|norm_mul_mat|attn_mul_mat)$" "^mul_mat_id$" "^flash_attn_ext$" "^(rope|rope_set_rows|rope_kv_store|cpy|set_rows|get_rows|soft_max|mul|add|sub|div|im2col|swiglu|rms_norm|pool_2d|geglu|ffn_glu|dup|cont|concat|tanh|silu|gelu_erf|gelu|norm|hadamard|conv_2d|sum_rows|argsort|argmax|swiglu_oai|scale|clamp|add_id)$")
  PIDS=()
  for i in 0 1 2 3; do
    run 200 "tm-fast-$i" "$B/test-matrix" --backend cuda --ops "${FAMS[$i]}" --max-failures 30 &
    PIDS+=($!)
  done
  run 200 tm-generic env TESSERA_CUDA_PATHS=generic "$B/test-matrix" --backend cuda --max-failures 30 &
  PIDS+=($!)
  for t in device tessera_backend_cuda nvrtc; do
    [ -x "$B/tests/$t" ] && run 120 "test-$t" "$B/tests/$t" --test-threads=1 --skip every_kernel_compiles_to_cubin
  done
  grep -h "test result\|panicked\|FAILED" "$L"/test-*.log >> "$R"
  wait "${PIDS[@]}"
  for n in tm-fast-0 tm-fast-1 tm-fast-2 tm-fast-3 tm-generic; do
    echo "$n: $(grep -E "^TOTAL" "$L/$n.log")" >> "$R"
    grep -A12 "^FAILURES" "$L/$n.log" | head -14 >> "$R"
    cat "$L/$n.log" >> "$OUT/test-matrix.log"
  done
  "$B/tessera" --version >> "$R" 2>&1
  wait $MAKE
  step "1B files: KLD against the CPU, greedy text, plans, benches ($(left)s left)"
  for q in Q4_0 Q4_K_M; do
    run 120 "quantize-$q" "$B/tessera" quantize $T/1b-f16.gguf $T/1b-$q.gguf $q &
  done
  wait
  ls -la $T/*.gguf >> "$R" 2>&1
  f=$T/1b-Q4_0.gguf
  # c=256: batches of 256 (cuBLAS); c=64: MMQ; each with every fast path, then generic.
  late 120 "kld" || kld_pair Q4_0-c256 $f 256 4 all generic
  late 100 "kld c=64" || kld_pair Q4_0-c64 $f 64 8 all generic
  # Decoding (one token a step: MMVQ, the Q/K/V group, RoPE into the cache, norms writing Q8_1).
  late 100 "kld decode" || KLD_EXTRA="-ub 1" kld_pair Q4_0-dec $f 64 2 all -pdl -fused generic
  late 100 "greedy" || greedy_pair Q4_0 $f 24
  for q in Q4_0 Q4_K_M f16; do
    late 60 "bench $q" && break
    run 60 "bench-$q" "$B/tessera" bench -m $T/1b-$q.gguf -ngl 99 -p 512 -n 128 -r 3
    grep "|" "$L/bench-$q.log" | tail -3 >> "$R"
  done
  if ! late 60 "bench -graphs"; then
    run 60 bench-nographs env TESSERA_CUDA_PATHS=-graphs "$B/tessera" bench -m $f -ngl 99 -p 64 -n 128 -r 2
    echo "Q4_0 without graphs:" >> "$R"; grep "|" "$L/bench-nographs.log" | tail -2 >> "$R"
  fi
  # Decoding without each of the newest decode changes, beside the full run above: no early
  # launches (programmatic dependent launch, sm_90), MMVQ rows on one warp each, no fused
  # windows (no Q/K/V group, attention inputs, Q8_1 from the norms).
  for off in -pdl -mmvq-split -fused; do
    late 50 "bench $off" && break
    run 45 "bench-dec$off" env TESSERA_CUDA_PATHS=$off "$B/tessera" bench -m $f -ngl 99 -p 0 -n 128 -r 3
    echo "Q4_0 decode, TESSERA_CUDA_PATHS=$off:" >> "$R"; grep "|" "$L/bench-dec$off.log" | tail -1 >> "$R"
  done
  if ! late 60 "bench depth"; then
    # (The 1B file's training context is 8192: the 16384-deep rows are the 8b mode's.)
    run 60 bench-depth "$B/tessera" bench -m $f -ngl 99 -p 0 -n 64 -d 512,4096 -r 2
    grep "|" "$L/bench-depth.log" | tail -2 >> "$R"
  fi
  if ! late 50 "llama-bench" && [ -n "${BUILD:-}" ] && ! kill -0 $BUILD 2> /dev/null && [ -x $LC/llama-bench ]; then
    for q in Q4_0 f16; do
      LD_LIBRARY_PATH=$LC run 45 "bench-lc-$q" $LC/llama-bench -m $T/1b-$q.gguf -ngl 99 -fa 1 -p 512 -n 128 -r 3
      grep "|" "$L/bench-lc-$q.log" | tail -2 >> "$R"
    done
  else
    echo "llama.cpp: $(tail -2 "$L/llama-build.log" 2> /dev/null | tr '\n' ' ')" >> "$R"
  fi
  late 40 "step timings" || step_timings $f
  late 40 "ncu" || ncu_decode $f "$(( $(left) - 10 ))"
  if ! late 40 "ncu prompt" && command -v ncu > /dev/null; then
    # The kernels of one 512-token prompt (the first graph: cuBLAS or MMQ, prompt attention).
    head -c 2600 README.md > $T/prompt.txt
    run "$(( $(left) - 10 ))" ncu-prompt ncu --clock-control none --metrics gpu__time_duration.sum --launch-count 400 --print-summary per-kernel "$B/tessera" run -m $f -f $T/prompt.txt -c 1024 -n 1 --temp 0 -ngl 99 -no-cnv
    grep -vE "^==PROF==" "$L/ncu-prompt.log" | grep -E "^  [a-zA-Z_0-9]+.* \(|gpu__time_duration" > "$OUT/ncu-prompt-summary.txt"
  fi
  echo "done $(date -u +%FT%TZ) after $(( $(date +%s) - T0 ))s" >> "$R"
  exit 0
fi

if [ "$QUICK" != profile ] && [ "$QUICK" != serve ] && [ "$QUICK" != 8b ]; then
step "CUDA tests (REQUIRE_CUDA=1)"
# (every_kernel_compiles... builds each module for four architectures: CI does that already.)
for t in "$B"/tests/*; do
  run 300 "test-$(basename "$t")" "$t" --test-threads=1 --skip every_kernel_compiles_to_cubin
done
grep -h "test result\|panicked\|FAILED" "$L"/test-*.log >> "$R"

step "CUDA test matrix: the generic kernels alone, then with every fast path"
# The plan's fast paths (TESSERA_CUDA_PATHS, crates/backend-cuda/src/plan) each have the generic
# kernels behind them: a case failing only in the second run is that path's fault, and the
# path can be named off (TESSERA_CUDA_PATHS=-mmvq) in every later step.
run 200 test-matrix-generic env TESSERA_CUDA_PATHS=generic "$B/test-matrix" --backend cuda --max-failures 80
echo "generic only: $(grep -E "^TOTAL" "$L/test-matrix-generic.log")" >> "$R"
run 300 test-matrix "$B/test-matrix" --backend cuda --max-failures 80
cp "$L/test-matrix.log" "$OUT/test-matrix.log"
echo "fast paths: $(grep -E "^TOTAL" "$L/test-matrix.log")" >> "$R"
grep -E "FAIL" "$L/test-matrix.log" | head -20 >> "$R"
"$B/tessera" --version >> "$R" 2>&1
fi

step "random-weight Llama-3.2-1B files"
python3 -m pip install -q --no-index --no-deps --target $T/site gpu-ref/gguf-*.whl >> "$L/pip.log" 2>&1
gunzip -c testdata/vocab/ggml-vocab-llama-bpe.gguf.gz > $T/vocab.gguf
[ -f $T/1b-f16.gguf ] || PYTHONPATH=$T/site run 120 make-1b python3 gpu-ref/make_random_llama.py 1b $T/vocab.gguf $T/1b-f16.gguf
TYPES="Q4_0 Q4_K_M Q8_0"; [ -n "$QUICK" ] && TYPES="Q4_0 Q4_K_M"
case "$QUICK" in profile|serve|8b) TYPES=Q4_0 ;; esac
for q in $TYPES; do
  [ -f $T/1b-$q.gguf ] || run 240 "quantize-$q" "$B/tessera" quantize $T/1b-f16.gguf $T/1b-$q.gguf $q
done
ls -la $T/*.gguf >> "$R" 2>&1
TEXT=$T/text.txt
cat README.md docs/ARCHITECTURE.md > $TEXT

if [ "$QUICK" = profile ]; then
  step "compute-sanitizer and ncu: bad accesses, and each kernel's share of a decoded token"
  # memcheck over a prompt batch (gemm, prompt attention) and a few decoded tokens (MMVQ, fused
  # windows, decode attention); ncu's per-kernel summary of 4 tokens (kernels per token and their
  # times; --clock-control none as METHOD.md says). Firecracker machines have both; on gVisor
  # they fail, and the step says so.
  if command -v compute-sanitizer > /dev/null; then
    SAN=(run -m $T/1b-Q4_0.gguf -p "$(head -c 1500 README.md)" -c 1024 -n 4 --temp 0 -ngl 99 -no-cnv)
    run 150 sanitizer compute-sanitizer --tool memcheck --print-limit 20 "$B/tessera" "${SAN[@]}"
    grep -E "ERROR SUMMARY|Invalid|out of bounds" "$L/sanitizer.log" | head -8 >> "$R"
  fi
  if command -v ncu > /dev/null; then
    run 150 ncu ncu --clock-control none --print-summary per-kernel "$B/tessera" run -m $T/1b-Q4_0.gguf -p "The capital of France is" -n 4 --temp 0 -ngl 99 -no-cnv
    grep -E "^ +[a-z_0-9]+.*\(|Invocations|Duration" "$L/ncu.log" | head -60 >> "$OUT/ncu-summary.txt"
    echo "ncu: $(grep -c "Invocations" "$L/ncu.log") kernel kinds (summary in ncu-summary.txt)" >> "$R"
  fi
  echo "done $(date -u +%FT%TZ)" >> "$R"
  exit 0
fi

if [ "$QUICK" = 8b ]; then
  step "Llama-3.1-8B-shaped random files: Tessera and llama.cpp b11312 (tg128, pp512; Q4_0 at depth)"
  # The issues' 8B rows: F16, Q4_0, Q4_K_M, Q8_0 (quantized there by Tessera, 16 threads), each
  # file benchmarked by both in the same run, medians of 3. About 16 GB of files under /tmp.
  [ -f $T/8b-f16.gguf ] || PYTHONPATH=$T/site run 200 make-8b python3 gpu-ref/make_random_llama.py 8b $T/vocab.gguf $T/8b-f16.gguf
  for q in Q4_0 Q4_K_M Q8_0; do
    [ -f $T/8b-$q.gguf ] || run 300 "quantize-8b-$q" "$B/tessera" quantize $T/8b-f16.gguf $T/8b-$q.gguf $q
  done
  if [ -n "${BUILD:-}" ]; then wait $BUILD; fi
  for q in Q4_0 Q4_K_M Q8_0 f16; do
    f=$T/8b-$q.gguf
    [ -f $f ] || continue
    run 200 "bench8b-tessera-$q" "$B/tessera" bench -m $f -ngl 99 -p 512 -n 128 -r 3
    grep "|" "$L/bench8b-tessera-$q.log" | tail -2 >> "$R"
    if [ -x $LC/llama-bench ]; then
      LD_LIBRARY_PATH=$LC run 200 "bench8b-lc-$q" $LC/llama-bench -m $f -ngl 99 -fa 1 -p 512 -n 128 -r 3
      grep "|" "$L/bench8b-lc-$q.log" | tail -2 >> "$R"
    fi
  done
  f=$T/8b-Q4_0.gguf
  # #40's GPU figures: the 8B target with the 1B-shaped file as its draft (same vocabulary;
  # random weights, so acceptance means nothing: the mechanics' cost), and n-gram lookup.
  spec_trio 8b $f $T/1b-Q4_0.gguf
  run 300 "bench8b-tessera-depth" "$B/tessera" bench -m $f -ngl 99 -p 0 -n 128 -d 4096,16384 -r 3
  grep "|" "$L/bench8b-tessera-depth.log" | tail -2 >> "$R"
  if [ -x $LC/llama-bench ]; then
    LD_LIBRARY_PATH=$LC run 300 "bench8b-lc-depth" $LC/llama-bench -m $f -ngl 99 -fa 1 -p 0 -n 128 -d 4096,16384 -r 3
    grep "|" "$L/bench8b-lc-depth.log" | tail -2 >> "$R"
  fi
  echo "done $(date -u +%FT%TZ)" >> "$R"
  exit 0
fi

if [ "$QUICK" = serve ]; then
  step "serving: tessera serve -ngl 99 --parallel 16 vs llama-server -ngl 99 -np 16 (1B Q4_0, random weights)"
  # The same script, prompts and settings for both (greedy, 128 tokens, ignore_eos); a ChatML
  # template for both, the random file having none.
  cat > $T/chatml.jinja <<'TEMPLATE'
{% for m in messages %}<|im_start|>{{ m.role }}
{{ m.content }}<|im_end|>
{% endfor %}<|im_start|>assistant
TEMPLATE
  serve_bench() { # NAME URL: waits for /health, then the clients
    for _ in $(seq 120); do
      python3 -c "import sys, urllib.request; urllib.request.urlopen(sys.argv[1] + '/health')" "$2" 2> /dev/null && break
      sleep 1
    done
    run 240 "serve-bench-$1" python3 tools/serve_bench.py "$2" --clients 1,4,16 --requests 2 --max-tokens 128 --label "$1"
    grep -vE "^ *$" "$L/serve-bench-$1.log" | tail -8 >> "$R"
  }
  f=$T/1b-Q4_0.gguf
  "$B/tessera" serve -m $f -ngl 99 --parallel 16 -c 16384 --port 8090 --chat-template-file $T/chatml.jinja > "$L/tessera-serve.log" 2>&1 &
  SP=$!
  serve_bench tessera http://127.0.0.1:8090
  kill $SP; wait $SP 2> /dev/null
  grep -iE "error|panic|warn" "$L/tessera-serve.log" | head -5 >> "$R"
  if [ -n "${BUILD:-}" ]; then wait $BUILD; fi
  if [ -x $LC/llama-server ]; then
    LD_LIBRARY_PATH=$LC $LC/llama-server -m $f -ngl 99 -np 16 -c 16384 -fa on --port 8091 --chat-template-file $T/chatml.jinja > "$L/llama-server.log" 2>&1 &
    SP=$!
    serve_bench llama-server http://127.0.0.1:8091
    kill $SP; wait $SP 2> /dev/null
  else
    echo "llama-server did not build (see llama-build.log)" >> "$R"
  fi
  echo "done $(date -u +%FT%TZ)" >> "$R"
  exit 0
fi

step "Tessera CUDA vs Tessera CPU (KL divergence, c=256, 4 chunks)"
for q in $TYPES f16; do
  f=$T/1b-$q.gguf
  [ -f $f ] || continue
  run 240 "ppl-cpu-$q" "$B/tessera" perplexity -m $f -f $TEXT -c 256 --chunks 4 --device none --kl-divergence-base $T/base-$q.kld
  for ngl in 99 9; do
    run 240 "kld-cuda-$q-ngl$ngl" "$B/tessera" perplexity -m $f -c 256 --chunks 4 -ngl $ngl --kl-divergence-base $T/base-$q.kld --kl-divergence
    echo "$q -ngl $ngl:" >> "$R"; grep -iE "mean +kld|same top|mean ppl|error" "$L/kld-cuda-$q-ngl$ngl.log" | head -6 >> "$R"
  done
  # The same with the generic kernels alone: the fast paths' own share of the divergence.
  run 240 "kld-cuda-$q-generic" env TESSERA_CUDA_PATHS=generic "$B/tessera" perplexity -m $f -c 256 --chunks 4 -ngl 99 --kl-divergence-base $T/base-$q.kld --kl-divergence
  echo "$q -ngl 99, generic kernels only:" >> "$R"; grep -iE "mean +kld|same top|error" "$L/kld-cuda-$q-generic.log" | head -4 >> "$R"
done

step "batches of 64 columns (the int8 tensor-core MMQ path) vs the CPU, and the same through cuBLAS (-mmq)"
# c=256 evaluates 256-token batches (cuBLAS); 64-token chunks take MMQ for the int8 types.
for q in Q4_0 Q4_K_M; do
  f=$T/1b-$q.gguf
  [ -f $f ] || continue
  run 120 "ppl-cpu-c64-$q" "$B/tessera" perplexity -m $f -f $TEXT -c 64 --chunks 8 --device none --kl-divergence-base $T/base64-$q.kld
  for paths in all -mmq; do
    run 120 "kld-cuda-c64-$q$paths" env TESSERA_CUDA_PATHS=$paths RUST_LOG=tessera_backend_cuda=debug "$B/tessera" perplexity -m $f -c 64 --chunks 8 -ngl 99 --kl-divergence-base $T/base64-$q.kld --kl-divergence
    echo "$q c=64 TESSERA_CUDA_PATHS=$paths:" >> "$R"; grep -iE "mean +kld|same top|error" "$L/kld-cuda-c64-$q$paths.log" | head -4 >> "$R"
    grep -oE "plan: .*" "$L/kld-cuda-c64-$q$paths.log" | sort -u | head -3 >> "$R"
  done
done

step "real models: Tessera CUDA vs Tessera CPU (c=256, 4 chunks)"
for f in $T/real/*.gguf; do
  [ -f "$f" ] || continue
  n=$(basename "$f" .gguf)
  run 240 "ppl-cpu-$n" "$B/tessera" perplexity -m $f -f $TEXT -c 256 --chunks 4 --device none --kl-divergence-base $T/base-$n.kld
  for ngl in 99 8; do
    run 240 "kld-cuda-$n-ngl$ngl" "$B/tessera" perplexity -m $f -c 256 --chunks 4 -ngl $ngl --kl-divergence-base $T/base-$n.kld --kl-divergence
    echo "$n -ngl $ngl:" >> "$R"; grep -iE "mean +kld|same top|mean ppl|error" "$L/kld-cuda-$n-ngl$ngl.log" | head -6 >> "$R"
  done
  greedy_pair "$n" "$f" 32
done

step "mixture of experts on the GPU: random qwen3moe (Q4_K_M) and gpt-oss (MXFP4_MOE), whole and split"
# Tessera's own random MoE models (crates/llama/src/synth.rs, 4 blocks, 16 experts of 256, 4 a
# token): KLD of CUDA (-ngl 99: experts, router sort, biases, sinks on the GPU; then with the
# first two blocks' experts on the CPU) against the CPU, and the greedy texts.
mkdir -p $T/vocab && gunzip -c testdata/vocab/ggml-vocab-qwen2.gguf.gz > $T/vocab/ggml-vocab-qwen2.gguf
run 120 write-synth "$B/write_synth" $T/synth $T/vocab synth-qwen3moe-f16 synth-gpt-oss-f16
for pair in "synth-qwen3moe-f16 Q4_K_M" "synth-gpt-oss-f16 MXFP4_MOE"; do
  set -- $pair
  m=$T/synth/$1-$2.gguf
  [ -f $m ] || run 120 "quantize-$1" "$B/tessera" quantize $T/synth/$1.gguf $m $2
  run 120 "ppl-cpu-$1" "$B/tessera" perplexity -m $m -f $TEXT -c 256 --chunks 4 --device none --kl-divergence-base $T/base-$1.kld
  for split in "" "--n-cpu-moe 2"; do
    tag=$1${split:+-ncmoe}
    run 120 "kld-cuda-$tag" "$B/tessera" perplexity -m $m -c 256 --chunks 4 -ngl 99 $split --kl-divergence-base $T/base-$1.kld --kl-divergence
    echo "$1 $2 -ngl 99 $split:" >> "$R"; grep -iE "mean +kld|same top|error|unsupported" "$L/kld-cuda-$tag.log" | head -4 >> "$R"
  done
  greedy_pair "$1" "$m" 16
done

step "greedy text, CPU vs CUDA"
for q in Q4_0 f16; do
  greedy_pair "$q" "$T/1b-$q.gguf" 24
done

step "an image prompt, CPU vs CUDA (the vision encoder offloaded: IM2COL, POOL_2D, attention)"
# The 1b file with a random Gemma 3 projector of its width (2048): the same greedy text when the
# model and the encoder run on the GPU; the encoder's time beside the CPU's.
run 60 mmproj "$B/write_mmproj" $T/mmproj-2048.gguf 2048 224 14 384 1536 6 6 4
IMG=crates/mtmd/tests/fixtures/images/rgb_37x23.png
IM=(run -m $T/1b-Q4_0.gguf --mmproj $T/mmproj-2048.gguf --image $IMG -p "Describe it:" -n 16 --temp 0 -no-cnv)
run 120 image-cpu "$B/tessera" "${IM[@]}" --device none
run 120 image-cuda "$B/tessera" "${IM[@]}" -ngl 99
if cmp -s <(sed '/load time/,$d' "$L/image-cpu.log") <(sed '/load time/,$d' "$L/image-cuda.log"); then
  echo "image: same text" >> "$R"
else
  echo "image: texts differ (see logs)" >> "$R"
fi
grep -h "image eval time" "$L/image-cpu.log" "$L/image-cuda.log" >> "$R"

step "Tessera bench -ngl 99"
for q in $([ -z "$QUICK" ] && echo Q4_0 Q4_K_M f16); do
  run 150 "bench-tessera-$q" "$B/tessera" bench -m $T/1b-$q.gguf -ngl 99 -p 512 -n 128 -r 3
  grep "|" "$L/bench-tessera-$q.log" | tail -3 >> "$R"
done
if [ -z "$QUICK" ]; then  # decoding without the fast paths, for their share of the speed
  run 150 "bench-tessera-Q4_0-generic" env TESSERA_CUDA_PATHS=generic "$B/tessera" bench -m $T/1b-Q4_0.gguf -ngl 99 -p 512 -n 128 -r 2
  echo "Q4_0, generic kernels only:" >> "$R"; grep "|" "$L/bench-tessera-Q4_0-generic.log" | tail -2 >> "$R"
  run 150 "bench-tessera-Q4_0-nographs" env TESSERA_CUDA_PATHS=-graphs "$B/tessera" bench -m $T/1b-Q4_0.gguf -ngl 99 -p 512 -n 128 -r 2
  echo "Q4_0, without CUDA graphs:" >> "$R"; grep "|" "$L/bench-tessera-Q4_0-nographs.log" | tail -2 >> "$R"
  # Batches: the int8 tensor-core kernels (default up to MMQ_MAX_COLUMNS = 128) against cuBLAS
  # (-mmq), by batch size and by parallel sequences (their decode steps' batch): the crossover
  # that sets MMQ_MAX_COLUMNS (crates/backend-cuda/src/plan/matmul.rs).
  for q in Q4_0 Q4_K_M; do
    for paths in all -mmq; do
      run 150 "bench-batches-$q$paths" env TESSERA_CUDA_PATHS=$paths "$B/tessera" bench -m $T/1b-$q.gguf -ngl 99 -p 16,64,128,256,512 -n 32 --npl 4,16 -r 3
      echo "$q batches, TESSERA_CUDA_PATHS=$paths:" >> "$R"; grep "|" "$L/bench-batches-$q$paths.log" | tail -7 >> "$R"
    done
  done
  # Decode attention at depth: the f16 tensor cores (a warp per KV head and 256 cells) against
  # the SIMT flash decoding.
  for paths in all -fattn-mma-dec; do
    run 150 "bench-depth$paths" env TESSERA_CUDA_PATHS=$paths "$B/tessera" bench -m $T/1b-Q4_0.gguf -ngl 99 -p 0 -n 64 -d 4096,16384 -r 3
    echo "Q4_0 decode at depth, TESSERA_CUDA_PATHS=$paths:" >> "$R"; grep "|" "$L/bench-depth$paths.log" | tail -2 >> "$R"
  done
  # Prompt attention: the f16 tensor cores against the SIMT tiles, on long prompts.
  for paths in all -fattn-mma; do
    run 150 "bench-attn$paths" env TESSERA_CUDA_PATHS=$paths "$B/tessera" bench -m $T/1b-Q4_0.gguf -ngl 99 -p 512,2048 -n 0 -r 3
    echo "Q4_0 prompts, TESSERA_CUDA_PATHS=$paths:" >> "$R"; grep "|" "$L/bench-attn$paths.log" | tail -2 >> "$R"
  done
fi

step "speculative decoding on the GPU (the mechanics' cost; random weights, so acceptance means nothing)"
if [ -z "$QUICK" ]; then
  # Plain, then the same file as its own draft (every proposal accepted: the best case of the
  # verification batch), then n-gram lookup (random text rarely repeats: mostly its overhead).
  spec_trio 1b $T/1b-Q4_0.gguf $T/1b-Q4_0.gguf
fi

step "llama.cpp b11312 beside it"
if [ -n "${BUILD:-}" ]; then wait $BUILD; fi
if [ -x $LC/llama-bench ]; then
  export LD_LIBRARY_PATH=$LC
  for q in Q4_0 Q4_K_M; do
    f=$T/1b-$q.gguf
    # -dev none: with -ngl 0 alone llama.cpp still runs large batches' products on the GPU
    # (op offload), which is not a CPU base.
    run 180 "lc-ppl-cpu-$q" $LC/llama-perplexity -m $f -f $TEXT -c 256 --chunks 4 -ngl 0 -dev none --kl-divergence-base $T/lc-base-$q.kld
    run 180 "lc-kld-cuda-$q" $LC/llama-perplexity -m $f -c 256 --chunks 4 -ngl 99 --kl-divergence-base $T/lc-base-$q.kld --kl-divergence
    echo "llama.cpp $q CUDA vs its CPU:" >> "$R"; grep -iE "mean *kld|same top" "$L/lc-kld-cuda-$q.log" | head -4 >> "$R"
    run 180 "kld-tessera-cuda-vs-lc-cpu-$q" "$B/tessera" perplexity -m $f -c 256 --chunks 4 -ngl 99 --kl-divergence-base $T/lc-base-$q.kld --kl-divergence
    echo "Tessera CUDA vs llama.cpp CPU, $q:" >> "$R"; grep -iE "mean +kld|same top" "$L/kld-tessera-cuda-vs-lc-cpu-$q.log" | head -4 >> "$R"
  done
  for q in $([ -z "$QUICK" ] && echo Q4_0 Q4_K_M f16); do
    run 150 "bench-lc-$q" $LC/llama-bench -m $T/1b-$q.gguf -ngl 99 -fa 1 -p 512 -n 128 -r 3
    grep "|" "$L/bench-lc-$q.log" | tail -3 >> "$R"
  done
else
  echo "llama.cpp did not build (see llama-build.log)" >> "$R"
  tail -20 "$L/llama-build.log" >> "$R" 2>/dev/null
fi
echo "done $(date -u +%FT%TZ)" >> "$R"
