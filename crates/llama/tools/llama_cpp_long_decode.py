#!/usr/bin/env python3
"""llama.cpp's logits when decoding deep in the context, the reference for the split-KV decode
attention.

From 512 KV cells (the cache view llama.cpp pads to 256: past 256 tokens in the context),
llama.cpp b11312's CPU flash attention for a one-token batch with an F16 (or F32) cache splits
the cells over its threads, each thread attending every head over its share, and merges the
shares; the bits depend on the thread count. For each real model and thread count (2, 3),
through llama-cpp-python 0.3.36 (flash attention, F16 cache, its default repacked weights,
n_ctx 1024): the text TEXT evaluated as one batch (about 600 tokens), then STEPS greedy tokens
decoded one at a time. For every step: the top-5 log-probabilities (log-softmax in float64 of
the float32 logits), the token, and the top-2 logit margin. Writes
crates/llama/tests/fixtures/long_decode/LEVEL.json (read by crates/llama/tests/long_decode.rs).

The matrix-vector products differ per SIMD level, so each level needs its own reference: run
this once per level with llama-cpp-python built with that level's explicit flags
(tools/make_ref_set.sh lists them).

Usage: VENV/bin/python crates/llama/tools/llama_cpp_long_decode.py LEVEL BUILD_FLAGS OUT.json \
    SMOLLM2.gguf QWEN.gguf GEMMA.gguf
"""
import json
import os
import sys

import numpy as np
import llama_cpp
from llama_cpp import Llama

from lcp_ref import cpu_flags, margin, top

COLOURS = ["red", "green", "blue", "amber", "grey", "white", "black"]
THINGS = ["boat", "lamp", "gate", "bridge", "tower", "mill", "garden", "well", "road"]
# Sentences that vary (so the attention spreads) and keep going (so the context is deep).
TEXT = " ".join(
    f"On day {i} the keeper painted the {COLOURS[i % 7]} {THINGS[(i * 5) % 9]} and wrote "
    f"in his book that {i * 3 + 1} ships had passed the {THINGS[(i * 2) % 9]}."
    for i in range(24))
THREADS = [2, 3]
STEPS = 10
TOP = 5


def main():
    level, flags_used, out_path, models = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
    cases = []
    for mp in models:
        for nth in THREADS:
            llm = Llama(model_path=mp, n_ctx=1024, n_batch=1024, n_ubatch=1024,
                        n_threads=nth, n_threads_batch=nth, flash_attn=True,
                        logits_all=True, verbose=False)
            toks = llm.tokenize(TEXT.encode(), add_bos=True, special=True)
            llm.eval(toks)
            steps = []
            logits = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
            for _ in range(STEPS):
                t = int(np.argmax(logits))
                llm.eval([t])
                logits = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
                steps.append({"token": t, "top": top(logits, TOP), "margin": margin(logits)})
            cases.append({"model": os.path.basename(mp), "threads": nth, "tokens": toks,
                          "steps": steps})
            print(f"{os.path.basename(mp)} {nth} threads: {len(toks)} tokens, "
                  f"greedy {[s['token'] for s in steps]}")
            del llm
    out = {"made_by": "crates/llama/tools/llama_cpp_long_decode.py with llama-cpp-python "
                      f"{llama_cpp.__version__} (llama.cpp b11312), weights repacked (llama.cpp's "
                      "default), flash attention, F16 cache, n_ctx 1024",
           "simd_level": level, "build": flags_used, "cpu": cpu_flags(), "text": TEXT,
           "cases": cases}
    os.makedirs(os.path.dirname(out_path), exist_ok=True)
    with open(out_path, "w") as f:
        json.dump(out, f)
        f.write("\n")


if __name__ == "__main__":
    main()
