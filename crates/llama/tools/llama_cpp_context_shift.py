#!/usr/bin/env python3
"""llama.cpp's logits across context shifts, the reference for `--context-shift`.

For each real model and K/V cache type (f16/f16, q8_0/q8_0), through llama.cpp b11312
(llama-cpp-python 0.3.36; flash attention, its default repacked weights, 2 threads, n_ctx 256):
the text TEXT evaluated as one batch; then SHIFTS times: the context shifted as llama.cpp's
tools shift it (keep the first N_KEEP tokens, drop half of the rest: llama_memory_seq_rm,
then llama_memory_seq_add moving the tail back, so the next decode applies the K-shift),
followed by STEPS greedy tokens decoded one at a time at the shifted positions. For every
greedy step: the top-5 log-probabilities (log-softmax in float64 of the float32 logits), the
token, and the top-2 logit margin. Writes crates/llama/tests/fixtures/context_shift/LEVEL.json
(read by crates/llama/tests/context_shift.rs).

A quantized cache turns the smallest float difference into another quantization level, so
each SIMD level needs its own reference: run this once per level with llama-cpp-python built
with that level's explicit flags (tools/make_ref_set.sh lists them).

Usage: VENV/bin/python crates/llama/tools/llama_cpp_context_shift.py LEVEL BUILD_FLAGS OUT.json \
    SMOLLM2.gguf QWEN.gguf GEMMA.gguf
"""
import json
import os
import sys

import numpy as np
import llama_cpp
from llama_cpp import Llama

from lcp_ref import cpu_flags, margin, top

TEXT = ("The old lighthouse keeper climbed the spiral stairs each evening, counting the steps "
        "as his father had taught him: one hundred and twelve, no more and no less. From the "
        "lamp room he could see the harbour, the fishing boats coming home, and far beyond "
        "them the dark line of the storm that the radio had promised for the night.")
CONFIGS = [("f16", "f16"), ("q8_0", "q8_0")]
TYPES = {"f16": llama_cpp.GGML_TYPE_F16, "q8_0": llama_cpp.GGML_TYPE_Q8_0}
N_KEEP = 8
SHIFTS = 2
STEPS = 12
TOP = 5


def main():
    level, flags_used, out_path, models = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
    cpu = cpu_flags()
    cases = []
    for mp in models:
        for k, v in CONFIGS:
            llm = Llama(model_path=mp, n_ctx=256, n_batch=256, n_ubatch=256, n_threads=2,
                        flash_attn=True, logits_all=True, type_k=TYPES[k], type_v=TYPES[v],
                        verbose=False)
            n_vocab = llm.n_vocab()
            toks = llm.tokenize(TEXT.encode(), add_bos=True, special=True)
            llm.eval(toks)
            logits = np.array(llm.scores[len(toks) - 1], dtype=np.float32)
            n_past = len(toks)
            shifts, steps = [], []
            for _ in range(SHIFTS):
                n_discard = (n_past - N_KEEP) // 2
                llm._ctx.kv_cache_seq_rm(0, N_KEEP, N_KEEP + n_discard)
                llm._ctx.kv_cache_seq_shift(0, N_KEEP + n_discard, n_past, -n_discard)
                n_past -= n_discard
                shifts.append({"n_keep": N_KEEP, "n_discard": n_discard})
                for _ in range(STEPS):
                    t = int(np.argmax(logits))
                    llm._batch.set_batch([t], n_past, True)
                    llm._ctx.decode(llm._batch)
                    n_past += 1
                    ptr = llm._ctx.get_logits_ith(-1)
                    logits = np.ctypeslib.as_array(ptr, shape=(n_vocab,)).astype(np.float32)
                    steps.append({"token": t, "top": top(logits, TOP), "margin": margin(logits)})
            cases.append({"model": os.path.basename(mp), "type_k": k, "type_v": v,
                          "tokens": toks, "shifts": shifts, "steps": steps})
            print(f"{os.path.basename(mp)} {k}/{v}: {len(toks)} tokens, "
                  f"tokens {[s['token'] for s in steps]}")
            del llm
    out = {"made_by": "crates/llama/tools/llama_cpp_context_shift.py with llama-cpp-python "
                      f"{llama_cpp.__version__} (llama.cpp b11312), weights repacked (llama.cpp's "
                      "default), flash attention, n_ctx 256, 2 threads",
           "simd_level": level, "build": flags_used, "cpu": cpu, "text": TEXT,
           "steps_per_shift": STEPS, "cases": cases}
    with open(out_path, "w") as f:
        json.dump(out, f)
        f.write("\n")


if __name__ == "__main__":
    main()
