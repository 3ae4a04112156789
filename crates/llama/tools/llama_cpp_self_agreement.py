#!/usr/bin/env python3
"""How well llama.cpp agrees with itself on the checks of testdata/refs/README.md.

For every model and prompt of a refs directory and each attention mode M, llama.cpp's *other*
path (fa-on for M = fa-off and the reverse) is fed the prompt in one batch, then M's greedy
tokens one at a time (as the references were made, and as Tessera's test feeds them); the
steps where M's top-2 margin is >= 0.1 but the other path's argmax differs are recorded in
OUT.json. Tessera's teacher-forced check allows no more disagreements than llama.cpp has with
itself.

With `--reproduction OUT2.json`, llama.cpp's *same* path is run too, the same way, and how
closely llama.cpp on this machine reproduces the reference is recorded: the NMSE of its
last-prompt-position logits against the stored ones (0 where it does exactly) and its own
teacher-forced disagreements. Tessera's checks allow at least that much. The stored logits are
sampled (`.logits.sample`, tools/pack_logits.py): the NMSE is estimated from the sample as the
Tessera test estimates its own (testdata/refs/README.md, "Logits files").

Usage: llama_cpp_self_agreement.py REFS_DIR OUT.json [--reproduction OUT2.json] MODEL.gguf...
(llama-cpp-python 0.3.36 = llama.cpp b11312; weights kept out of the AMX/repack buffers.)"""
import glob, json, os, sys
import numpy as np
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../../tools"))
import pack_logits
import llama_cpp
import llama_cpp.llama as _L
from llama_cpp import Llama

_orig = llama_cpp.llama_model_default_params
def _params():
    p = _orig(); p.use_extra_bufts = os.environ.get("REPACK") == "1"; return p
llama_cpp.llama_model_default_params = _params
_L.llama_cpp.llama_model_default_params = _params

refs, out, args = sys.argv[1], sys.argv[2], sys.argv[3:]
repro_out = None
if args[:1] == ["--reproduction"]:
    repro_out, args = args[1], args[2:]
models = args


def teacher_forced(llm, p, g):
    """Logits rows after the prompt (one batch) and after each of g[:-1] fed one at a time."""
    llm.reset()
    llm.eval(p)
    for t in g[:-1]:
        llm.eval([t])
    return [llm.scores[len(p) - 1 + t] for t in range(len(g))]


result, repro = {}, {}
for mp in models:
    stem = os.path.basename(mp).rsplit(".gguf", 1)[0]
    for fa in (1, 0):
        llm = Llama(model_path=mp, n_ctx=512, n_batch=512, n_ubatch=512, n_threads=2,
                    flash_attn=bool(fa), logits_all=True, verbose=False)
        mode = "fa-on" if fa else "fa-off"
        checked = "fa-off" if fa else "fa-on"
        for jf in sorted(glob.glob(os.path.join(refs, checked, stem, "*.json"))):
            r = json.load(open(jf))
            p, g, m = r["prompt_tokens"], r["greedy_tokens"], r["greedy_top2_margins"]
            rows = teacher_forced(llm, p, g)
            bad = [t for t in range(len(g)) if m[t] >= 0.1 and int(np.argmax(rows[t])) != g[t]]
            key = f"{stem}/{os.path.basename(jf)[:-5]}/{checked}"
            result[key] = bad
            print(key, bad, flush=True)
        if repro_out:
            for jf in sorted(glob.glob(os.path.join(refs, mode, stem, "*.json"))):
                r = json.load(open(jf))
                p, g, m = r["prompt_tokens"], r["greedy_tokens"], r["greedy_top2_margins"]
                rows = teacher_forced(llm, p, g)
                got = np.array(rows[0], dtype=np.float32)
                want = pack_logits.read(jf[:-5] + ".logits.sample")
                key = f"{stem}/{os.path.basename(jf)[:-5]}/{mode}"
                repro[key] = {
                    "nmse": float(pack_logits.nmse_estimate(want, got)),
                    "teacher_forced": [t for t in range(len(g))
                                       if m[t] >= 0.1 and int(np.argmax(rows[t])) != g[t]],
                }
                print(key, "reproduction", repro[key], flush=True)
json.dump(result, open(out, "w"), indent=1, sort_keys=True)
if repro_out:
    json.dump(repro, open(repro_out, "w"), indent=1, sort_keys=True)
