#!/usr/bin/env python3
"""llama.cpp's logits with M-RoPE, the reference for crates/llama/tests/mrope.rs.

The random Qwen2-VL language model `synth-qwen2vl-q8_0` (`cargo xtask synth-models DIR`)
through llama.cpp b11312 (llama-cpp-python 0.3.36; flash attention, 2 threads, n_ctx 256,
n_ubatch 512): a text prompt, then an "image" of 3 rows of 4 embeddings (value
((i*131 + j*71) mod 257)/257 - 0.5 for token i, channel j: exact in f32) at time t = the prompt's
length with mtmd's positions (t, t+y, t+x, 0), then a text tail from t + 4 (mtmd's n_pos: the
grid's larger side), then STEPS greedy tokens decoded one at a time. Records the top-5
log-probabilities after the tail and each step, the tokens and the top-2 margins. Writes
crates/llama/tests/fixtures/mrope/LEVEL.json.

Each SIMD level needs its own reference: run with the python of a llama-cpp-python built with
the level's explicit flags (tools/make_ref_set.sh).

Usage: VENV/bin/python crates/llama/tools/llama_cpp_mrope.py LEVEL BUILD_FLAGS MODEL.gguf OUT.json
"""
import ctypes
import json
import os
import sys

import numpy as np
import llama_cpp
from llama_cpp import Llama

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lcp_ref import cpu_flags, margin, top  # noqa: E402

PROMPT = "Describe the picture:"
TAIL = " It shows"
GRID = (4, 3)  # width, height
STEPS = 8
TOP = 5


def embeddings(n, n_embd):
    i = np.arange(n).reshape(-1, 1)
    j = np.arange(n_embd).reshape(1, -1)
    return (((i * 131 + j * 71) % 257).astype(np.float32) / np.float32(257.0)
            - np.float32(0.5)).astype(np.float32)


def main():
    level, flags_used, model, out_path = sys.argv[1:5]
    llm = Llama(model_path=model, n_ctx=256, n_batch=512, n_ubatch=512, n_threads=2,
                n_threads_batch=2, flash_attn=True, verbose=False)
    ctx, n_vocab, n_embd = llm.ctx, llm.n_vocab(), llm.n_embd()
    prompt = llm.tokenize(PROMPT.encode(), add_bos=True, special=True)
    tail = llm.tokenize(TAIL.encode(), add_bos=False, special=True)

    def decode_tokens(tokens, start, logits_last):
        b = llama_cpp.llama_batch_init(len(tokens), 0, 1)
        for k, t in enumerate(tokens):
            b.token[k] = t
            b.pos[k] = start + k
            b.n_seq_id[k] = 1
            b.seq_id[k][0] = 0
            b.logits[k] = logits_last and k + 1 == len(tokens)
        b.n_tokens = len(tokens)
        assert llama_cpp.llama_decode(ctx, b) == 0
        llama_cpp.llama_batch_free(b)

    decode_tokens(prompt, 0, False)
    t = len(prompt)
    w, h = GRID
    n = w * h
    emb = np.ascontiguousarray(embeddings(n, n_embd))
    # mtmd's decoder positions: all times, then rows, columns, and 0.
    pos = np.zeros(4 * n, dtype=np.int32)
    for k in range(n):
        y, x = divmod(k, w)
        pos[k], pos[n + k], pos[2 * n + k], pos[3 * n + k] = t, t + y, t + x, 0
    n_seq = (ctypes.c_int32 * n)(*([1] * n))
    seq0 = (llama_cpp.llama_seq_id * 1)(0)
    seq_ids = (ctypes.POINTER(llama_cpp.llama_seq_id) * (n + 1))(*([ctypes.cast(seq0, ctypes.POINTER(llama_cpp.llama_seq_id))] * n), None)
    logits = (ctypes.c_int8 * n)(*([0] * n))
    batch = llama_cpp.llama_batch(
        n_tokens=n, token=None,
        embd=emb.ctypes.data_as(ctypes.POINTER(ctypes.c_float)),
        pos=pos.ctypes.data_as(ctypes.POINTER(llama_cpp.llama_pos)),
        n_seq_id=n_seq, seq_id=seq_ids, logits=logits)
    assert llama_cpp.llama_decode(ctx, batch) == 0
    decode_tokens(tail, t + max(w, h), True)

    def last_logits():
        ptr = llama_cpp.llama_get_logits_ith(ctx, -1)
        return np.ctypeslib.as_array(ptr, shape=(n_vocab,)).astype(np.float32).copy()

    lg = last_logits()
    steps = [{"top": top(lg, TOP), "margin": margin(lg)}]
    p = t + max(w, h) + len(tail)
    for _ in range(STEPS):
        tok = int(np.argmax(lg))
        decode_tokens([tok], p, True)
        p += 1
        lg = last_logits()
        steps.append({"token": tok, "top": top(lg, TOP), "margin": margin(lg)})
    print(f"prompt {len(prompt)}, image {w}x{h} at {t}, tail {len(tail)}, greedy "
          f"{[s.get('token') for s in steps[1:]]}")
    out = {"made_by": "crates/llama/tools/llama_cpp_mrope.py with llama-cpp-python "
                      f"{llama_cpp.__version__} (llama.cpp b11312), flash attention, 2 threads, "
                      "n_ctx 256, n_ubatch 512",
           "simd_level": level, "build": flags_used, "cpu": cpu_flags(), "prompt": PROMPT,
           "prompt_tokens": prompt, "tail": TAIL, "tail_tokens": tail, "grid": list(GRID),
           "steps": steps}
    with open(out_path, "w") as f:
        json.dump(out, f)
        f.write("\n")


if __name__ == "__main__":
    main()
