#!/usr/bin/env python3
"""llama.cpp's outputs on a random-weight model of an architecture checked by one fixture (the
Granite file of examples/granite/examples/write_synth.rs, tessera_llama::synth::family_models()
written by `cargo xtask synth-models`): the prompt's tokens, the last prompt position's logits
(every 16th id and the top 20), and 16 greedy tokens with llama.cpp's top-2 margin at each
step, flash attention on (FA=0: off), a context of N_CTX cells (default 512).
Usage: make_family_refs.py MODEL.gguf OUT.json   (REPACK=0: plain weights; never repack with AMX)
"""
import json, os, platform, sys
import numpy as np
import llama_cpp
import llama_cpp.llama as _L
from llama_cpp import Llama

_orig = llama_cpp.llama_model_default_params
def _params():
    p = _orig(); p.use_extra_bufts = os.environ.get("REPACK", "1") == "1"; return p
llama_cpp.llama_model_default_params = _params
_L.llama_cpp.llama_model_default_params = _params

PROMPT = "The quick brown fox jumps over the lazy dog because"
path, out = sys.argv[1], sys.argv[2]
fa = os.environ.get("FA", "1") == "1"
n_ctx = int(os.environ.get("N_CTX", "512"))
llm = Llama(model_path=path, n_ctx=n_ctx, n_batch=512, n_ubatch=512, n_threads=2, flash_attn=fa,
            logits_all=True, verbose=False)
toks = llm.tokenize(PROMPT.encode(), add_bos=True, special=True)
llm.eval(toks)
last = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
greedy, margins = [], []
logits = last
for _ in range(16):
    order = np.argsort(-logits)
    t = int(order[0])
    greedy.append(t); margins.append(float(logits[order[0]] - logits[order[1]]))
    llm.eval([t])
    logits = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
top = np.argsort(-last)[:20]
flags = open("/proc/cpuinfo").read()
json.dump({
    "prompt": PROMPT, "flash_attn": fa, "n_ctx": n_ctx, "prompt_tokens": toks, "greedy_tokens": greedy, "greedy_top2_margins": margins,
    "sample_step": 16, "logits_sample": [float(f"{x:.9g}") for x in last[::16]],
    "top20": [[int(i), float(f"{last[i]:.9g}")] for i in top],
    "build": {"llama_cpp_python": llama_cpp.__version__, "simd_level": "avx512" if "avx512f" in flags else "avx2",
              "repack": os.environ.get("REPACK", "1") == "1", "cpu": platform.processor() or "x86_64"},
}, open(out, "w"), separators=(",", ":"))
print("prompt", len(toks), "greedy", greedy[:8], "margins", [round(m, 3) for m in margins[:8]])
