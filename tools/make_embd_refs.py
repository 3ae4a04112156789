#!/usr/bin/env python3
"""llama.cpp's pooled embeddings (through llama-cpp-python) for tessera-llama's embeddings test.

For each model: the texts' token ids (add_bos as the model says, special tokens parsed) and
llama.cpp's pooled, unnormalized embedding of each, with flash attention on, for one pooling
type. Writes one JSON per model to OUTDIR (testdata/refs/embeddings/), recording the build.
REPACK=0 keeps weights in plain buffers (never repack on a CPU with AMX: llama.cpp's AMX path
crashes there); the default is llama.cpp's own (repacking on).
Usage: make_embd_refs.py OUTDIR MODEL.gguf:POOLING...   (POOLING: mean, cls or last)
"""
import json, os, platform, sys
import llama_cpp
import llama_cpp.llama as _L
from llama_cpp import Llama

_orig = llama_cpp.llama_model_default_params
def _params():
    p = _orig(); p.use_extra_bufts = os.environ.get("REPACK", "1") == "1"; return p
llama_cpp.llama_model_default_params = _params
_L.llama_cpp.llama_model_default_params = _params

TEXTS = [
    "The cat sat on the mat.",
    "A cat was sitting on the mat.",
    "Quarterly revenue rose five percent on strong cloud sales.",
    "def add(a, b):\n    return a + b\n",
]
POOL = {"mean": llama_cpp.LLAMA_POOLING_TYPE_MEAN, "cls": llama_cpp.LLAMA_POOLING_TYPE_CLS,
        "last": llama_cpp.LLAMA_POOLING_TYPE_LAST}
outdir = sys.argv[1]
os.makedirs(outdir, exist_ok=True)
flags = open("/proc/cpuinfo").read()
level = "avx512" if "avx512f" in flags else "avx2"
for arg in sys.argv[2:]:
    path, pooling = arg.rsplit(":", 1)
    llm = Llama(model_path=path, embedding=True, pooling_type=POOL[pooling], n_ctx=512,
                n_batch=512, n_ubatch=512, n_threads=2, flash_attn=True, verbose=False)
    items = []
    for t in TEXTS:
        toks = llm.tokenize(t.encode(), add_bos=True, special=True)
        e = llm.embed(t, normalize=False)
        items.append({"text": t, "tokens": toks, "embedding": [float(f"{x:.9g}") for x in e]})
    stem = os.path.basename(path).rsplit(".gguf", 1)[0]
    out = {
        "model": os.path.basename(path), "pooling": pooling, "flash_attn": True,
        "build": {"llama_cpp_python": llama_cpp.__version__, "simd_level": level,
                  "repack": os.environ.get("REPACK", "1") == "1", "cpu": platform.processor() or "x86_64"},
        "items": items,
    }
    with open(os.path.join(outdir, f"{stem}.json"), "w") as f:
        json.dump(out, f, separators=(",", ":"))
    print(stem, pooling, len(items), len(items[0]["embedding"]))
