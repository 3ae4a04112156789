#!/usr/bin/env python3
"""How well llama.cpp agrees with itself on the teacher-forced check of shared/refs/README.md.

For every model and prompt of a refs directory and each attention mode M, llama.cpp's *other*
path (fa-on for M = fa-off and the reverse) is fed the prompt plus M's greedy tokens in one
batch; the steps where M's top-2 margin is >= 0.1 but the other path's argmax differs are
recorded. Tessera's teacher-forced check allows no more disagreements than llama.cpp has with
itself. Usage: llama_cpp_self_agreement.py REFS_DIR OUT.json MODEL.gguf...
(llama-cpp-python 0.3.36 = llama.cpp b11312; weights kept out of the AMX/repack buffers.)"""
import glob, json, os, sys
import numpy as np
import llama_cpp
import llama_cpp.llama as _L
from llama_cpp import Llama

_orig = llama_cpp.llama_model_default_params
def _params():
    p = _orig(); p.use_extra_bufts = False; return p
llama_cpp.llama_model_default_params = _params
_L.llama_cpp.llama_model_default_params = _params

refs, out, models = sys.argv[1], sys.argv[2], sys.argv[3:]
result = {}
for mp in models:
    stem = os.path.basename(mp).rsplit(".gguf", 1)[0]
    for fa in (1, 0):
        llm = Llama(model_path=mp, n_ctx=512, n_batch=512, n_ubatch=512, n_threads=2,
                    flash_attn=bool(fa), logits_all=True, verbose=False)
        checked = "fa-off" if fa else "fa-on"
        for jf in sorted(glob.glob(os.path.join(refs, checked, stem, "*.json"))):
            r = json.load(open(jf))
            p, g, m = r["prompt_tokens"], r["greedy_tokens"], r["greedy_top2_margins"]
            llm.reset()
            llm.eval(p + g)
            bad = [t for t in range(len(g))
                   if m[t] >= 0.1 and int(np.argmax(llm.scores[len(p) - 1 + t])) != g[t]]
            key = f"{stem}/{os.path.basename(jf)[:-5]}/{checked}"
            result[key] = bad
            print(key, bad, flush=True)
json.dump(result, open(out, "w"), indent=1, sort_keys=True)
