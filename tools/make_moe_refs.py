#!/usr/bin/env python3
"""llama.cpp's outputs on the random-weight mixture-of-experts model of
tessera_llama::synth::moe_models() (written in F16 by `cargo xtask synth-models DIR`), after
llama.cpp's own quantizer made it Q4_K_M (FTYPE=38: MXFP4_MOE, for gpt-oss): a digest of the quantized tensors (name, type, bytes,
sorted by name: llama.cpp writes them in name order), every prompt position's top-5 logits and
the logit and log-probability of the next prompt token, the last position's logits (every 16th
id), and 16 greedy tokens with llama.cpp's top-2 margins. Flash attention on (FA=0: off).
Usage: make_moe_refs.py BASE-F16.gguf OUT.json   (REPACK=0: plain weights; never repack with AMX)
"""
import ctypes, hashlib, json, os, platform, sys, tempfile
import numpy as np
import gguf
import llama_cpp
import llama_cpp.llama as _L
from llama_cpp import Llama

_orig = llama_cpp.llama_model_default_params
def _params():
    p = _orig(); p.use_extra_bufts = os.environ.get("REPACK", "1") == "1"; return p
llama_cpp.llama_model_default_params = _params
_L.llama_cpp.llama_model_default_params = _params

PROMPT = ("The history of the river valley begins with small farming villages along its banks. "
          "Over centuries the villages grew into market towns, linked by roads and bridges, and the "
          "towns traded grain, wool and timber with the coast. Merchants built warehouses by the "
          "water, and scholars came to study the old records kept in the abbey library, where "
          "monks had copied maps, letters and accounts of floods, harvests and fairs for hundreds "
          "of years before the railway arrived.")

base, out = sys.argv[1], sys.argv[2]
fa = os.environ.get("FA", "1") == "1"
tmp = tempfile.mkdtemp()
q = os.path.join(tmp, "quantized.gguf")
qp = llama_cpp.llama_model_quantize_default_params()
qp.ftype = int(os.environ.get("FTYPE", "15"))  # 15: LLAMA_FTYPE_MOSTLY_Q4_K_M
qp.nthread = 2
assert llama_cpp.llama_model_quantize(base.encode(), q.encode(), ctypes.byref(qp)) == 0
rd = gguf.GGUFReader(q)
lines = sorted(f"{t.name}:{int(t.tensor_type)}:{hashlib.sha256(t.data.tobytes()).hexdigest()}\n"
               for t in rd.tensors)
digest = hashlib.sha256("".join(lines).encode()).hexdigest()
types = {t.name: t.tensor_type.name for t in rd.tensors}

llm = Llama(model_path=q, n_ctx=512, n_batch=512, n_ubatch=512, n_threads=2, flash_attn=fa,
            logits_all=True, verbose=False)
toks = llm.tokenize(PROMPT.encode(), add_bos=True, special=True)
llm.eval(toks)
n = len(toks)
positions = []
for p in range(n):
    l = np.array(llm.scores[p], dtype=np.float64)
    lse = float(np.log(np.sum(np.exp(l - l.max()))) + l.max())
    top = np.argsort(-l)[:5]
    e = {"top5": [[int(i), float(f"{l[i]:.9g}")] for i in top]}
    if p + 1 < n:
        t = toks[p + 1]
        e["next"] = [int(t), float(f"{l[t]:.9g}"), float(f"{l[t] - lse:.12g}")]
    positions.append(e)
last = np.array(llm.scores[n - 1], dtype=np.float32)
greedy, margins = [], []
logits = last
for _ in range(16):
    order = np.argsort(-logits)
    t = int(order[0])
    greedy.append(t); margins.append(float(logits[order[0]] - logits[order[1]]))
    llm.eval([t])
    logits = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
nll = -np.mean([e["next"][2] for e in positions if "next" in e])
flags = open("/proc/cpuinfo").read()
json.dump({
    "prompt": PROMPT, "flash_attn": fa, "ftype": qp.ftype, "quantized_tensors_sha256": digest,
    "types": {k: types[k] for k in sorted(types) if "exps" in k or "gate_inp" in k},
    "prompt_tokens": toks, "positions": positions, "mean_nll": nll,
    "greedy_tokens": greedy, "greedy_top2_margins": margins,
    "sample_step": 16, "logits_sample": [float(f"{x:.9g}") for x in last[::16]],
    "build": {"llama_cpp_python": llama_cpp.__version__, "simd_level": "avx512" if "avx512f" in flags else "avx2",
              "repack": os.environ.get("REPACK", "1") == "1", "cpu": platform.processor() or "x86_64"},
}, open(out, "w"), separators=(",", ":"))
print("prompt", n, "ppl", round(float(np.exp(nll)), 3), "greedy", greedy[:8], "margins", [round(m, 3) for m in margins[:8]])
