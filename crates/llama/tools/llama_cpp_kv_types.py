#!/usr/bin/env python3
"""llama.cpp's log-probabilities with a quantized KV cache, the reference for `-ctk/-ctv`.

For each real model and cache configuration (K/V: q8_0/q8_0, q4_0/q4_0, f16/q8_0), through
llama.cpp b11312 (llama-cpp-python 0.3.36; flash attention, its default repacked weights):
the text TEXT evaluated as one batch, the top-5 log-probabilities (log-softmax in float64 of
the float32 logits) at every position, then a greedy continuation of GREEDY tokens (each
decoded alone, so the quantized cache is read back) with the top-2 logit margin of each step.
Writes crates/llama/tests/fixtures/kv_types/LEVEL.json (read by crates/llama/tests/kv_types.rs).

llama.cpp b11312 rotates Q, K and V by Walsh-Hadamard matrices when the cache is quantized,
and a quantized cache turns the smallest float differences into different quantization
levels, so each SIMD level needs its own reference: run this once per level with
llama-cpp-python built with that level's explicit flags (tools/make_ref_set.sh lists them;
`-DGGML_AVX512_BF16=OFF` and AMX off for avx512), which compute the same on every CPU of the
level.

Usage: VENV/bin/python crates/llama/tools/llama_cpp_kv_types.py LEVEL BUILD_FLAGS OUT.json \
    SMOLLM2.gguf QWEN.gguf GEMMA.gguf
"""
import json
import os
import sys

import llama_cpp
from llama_cpp import Llama

from lcp_ref import cpu_flags, evaluated, greedy

TEXT = ("The old lighthouse keeper climbed the spiral stairs each evening, counting the steps "
        "as his father had taught him: one hundred and twelve, no more and no less. From the "
        "lamp room he could see the harbour, the fishing boats coming home, and far beyond "
        "them the dark line of the storm that the radio had promised for the night.")
CONFIGS = [("q8_0", "q8_0"), ("q4_0", "q4_0"), ("f16", "q8_0")]
TYPES = {"f16": llama_cpp.GGML_TYPE_F16, "q8_0": llama_cpp.GGML_TYPE_Q8_0,
         "q4_0": llama_cpp.GGML_TYPE_Q4_0}
GREEDY = 24
TOP = 5


def main():
    level, flags_used, out_path, models = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
    cpu = cpu_flags()
    cases = []
    for mp in models:
        for k, v in CONFIGS:
            llm = Llama(model_path=mp, n_ctx=512, n_batch=512, n_ubatch=512, n_threads=2,
                        flash_attn=True, logits_all=True, type_k=TYPES[k], type_v=TYPES[v],
                        verbose=False)
            toks = llm.tokenize(TEXT.encode(), add_bos=True, special=True)
            top = evaluated(llm, toks, TOP)
            gen, margins = greedy(llm, GREEDY)
            cases.append({"model": os.path.basename(mp), "type_k": k, "type_v": v,
                          "tokens": toks, "top": top, "greedy": gen, "margins": margins})
            print(f"{os.path.basename(mp)} {k}/{v}: {len(toks)} tokens, greedy {gen[:8]}")
            del llm
    out = {"made_by": "crates/llama/tools/llama_cpp_kv_types.py with llama-cpp-python "
                      f"{llama_cpp.__version__} (llama.cpp b11312), weights repacked (llama.cpp's "
                      "default), flash attention, 2 threads",
           "simd_level": level, "build": flags_used, "cpu": cpu, "text": TEXT, "cases": cases}
    with open(out_path, "w") as f:
        json.dump(out, f)
        f.write("\n")


if __name__ == "__main__":
    main()
