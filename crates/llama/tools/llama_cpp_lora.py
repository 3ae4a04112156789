#!/usr/bin/env python3
"""llama.cpp's log-probabilities with two LoRA adapters on SmolLM2, the reference for `--lora`.

Writes two random adapters with the `gguf` package (values from `value()`, which
crates/llama/tests/lora.rs computes the same way, so the test writes byte-identical files):
  - "attn": F16, rank 8, alpha 16, on every layer's attn_q/attn_k/attn_v/attn_output, scale 0.75;
  - "ffn":  F32, rank 4, no alpha, on the even layers' ffn_up/ffn_gate/ffn_down, scale 0.5.
They change different weights, so the order llama.cpp adds them in (a hash map's) does not
matter. Through llama.cpp b11312 (llama-cpp-python 0.3.36: llama_adapter_lora_init and
llama_set_adapters_lora; flash attention, F16 cache, its default repacked weights, 2 threads):
the text TEXT evaluated as one batch, the top-5 log-probabilities (log-softmax in float64 of
the float32 logits) at every position, then GREEDY greedy tokens decoded one by one with the
top-2 logit margin of each step. The same without adapters is recorded too, so the test can
see that the adapters change the answer.

Each SIMD level needs its own reference (the products' bits follow the build): run this with
llama-cpp-python built with the level's explicit flags (tools/make_ref_set.sh lists them).

Usage: VENV/bin/python crates/llama/tools/llama_cpp_lora.py LEVEL BUILD_FLAGS OUT.json SMOLLM2.gguf
"""
import ctypes
import json
import os
import sys
import tempfile

import numpy as np
import gguf
import llama_cpp
from llama_cpp import Llama

from lcp_ref import cpu_flags, evaluated, greedy

TEXT = ("The old lighthouse keeper climbed the spiral stairs each evening, counting the steps "
        "as his father had taught him: one hundred and twelve, no more and no less.")
GREEDY = 16
TOP = 5
MASK = (1 << 64) - 1

# (name, dtype, rank, alpha or None, scale, layers' tensors)
ADAPTERS = [
    ("attn", "f16", 8, 16.0, 0.75, lambda il: ["attn_q", "attn_k", "attn_v", "attn_output"]),
    ("ffn", "f32", 4, None, 0.5, lambda il: ["ffn_up", "ffn_gate", "ffn_down"] if il % 2 == 0 else []),
]
AMP = 0.05


def fnv1a(name):
    h = 0xcbf29ce484222325
    for b in name.encode():
        h = ((h ^ b) * 0x100000001b3) & MASK
    return h


def values(name, n):
    """n values in [-AMP, AMP]: element i from a 64-bit mix of i and the tensor name's FNV-1a."""
    seed = fnv1a(name)
    i = np.arange(n, dtype=np.uint64)
    with np.errstate(over="ignore"):
        x = (i + np.uint64(1)) * np.uint64(0x9E3779B97F4A7C15) + np.uint64(seed)
        x ^= x >> np.uint64(31)
        x *= np.uint64(0xBF58476D1CE4E5B9)
        x ^= x >> np.uint64(29)
    k = (x % np.uint64(2001)).astype(np.float64)
    return ((k - 1000.0) * AMP / 1000.0).astype(np.float32)


def write_adapter(path, spec, shapes, n_layer):
    name, dtype, rank, alpha, _, tensors = spec
    w = gguf.GGUFWriter(path, "llama")
    w.add_string("general.type", "adapter")
    w.add_string("adapter.type", "lora")
    if alpha is not None:
        w.add_float32("adapter.lora.alpha", alpha)
    for il in range(n_layer):
        for t in tensors(il):
            base = f"blk.{il}.{t}.weight"
            n_in, n_out = shapes[base]
            for half, (ne0, ne1) in (("lora_a", (n_in, rank)), ("lora_b", (rank, n_out))):
                tname = f"{base}.{half}"
                v = values(tname, ne0 * ne1).reshape(ne1, ne0)
                w.add_tensor(tname, v.astype(np.float16 if dtype == "f16" else np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def run(model_path, adapters):
    llm = Llama(model_path=model_path, n_ctx=256, n_batch=256, n_ubatch=256, n_threads=2,
                flash_attn=True, logits_all=True, verbose=False)
    keep = []
    if adapters:
        ptrs = []
        for path, _ in adapters:
            p = llama_cpp.llama_adapter_lora_init(llm._model.model, path.encode())
            assert p, path
            keep.append(p)
            ptrs.append(p)
        arr = (llama_cpp.llama_adapter_lora_p_ctypes * len(ptrs))(*ptrs)
        scales = (ctypes.c_float * len(ptrs))(*[s for _, s in adapters])
        assert llama_cpp.llama_set_adapters_lora(llm._ctx.ctx, arr, len(ptrs), scales) == 0
    toks = llm.tokenize(TEXT.encode(), add_bos=True, special=True)
    top = evaluated(llm, toks, TOP)
    gen, margins = greedy(llm, GREEDY)
    del llm
    return toks, top, gen, margins


def main():
    level, flags_used, out_path, model_path = sys.argv[1:5]
    reader = gguf.GGUFReader(model_path)
    shapes = {t.name: (int(t.shape[0]), int(t.shape[1])) for t in reader.tensors
              if len(t.shape) == 2}
    n_layer = 1 + max(int(t.name.split(".")[1]) for t in reader.tensors
                      if t.name.startswith("blk."))
    cpu = cpu_flags()
    with tempfile.TemporaryDirectory() as d:
        paths = []
        for spec in ADAPTERS:
            p = os.path.join(d, f"{spec[0]}.gguf")
            write_adapter(p, spec, shapes, n_layer)
            paths.append((p, spec[4]))
        toks, top, gen, margins = run(model_path, paths)
    _, base_top, base_gen, _ = run(model_path, [])
    print(f"adapters: greedy {gen[:8]}; without: {base_gen[:8]}")
    out = {"made_by": "crates/llama/tools/llama_cpp_lora.py with llama-cpp-python "
                      f"{llama_cpp.__version__} (llama.cpp b11312), weights repacked (llama.cpp's "
                      "default), flash attention, F16 cache, 2 threads",
           "simd_level": level, "build": flags_used, "cpu": cpu, "model": os.path.basename(model_path),
           "text": TEXT, "amp": AMP,
           "adapters": [{"name": n, "dtype": t, "rank": r, "alpha": a, "scale": s}
                        for n, t, r, a, s, _ in ADAPTERS],
           "tokens": toks, "top": top, "greedy": gen, "margins": margins,
           "base_top": base_top}
    with open(out_path, "w") as f:
        json.dump(out, f)
        f.write("\n")


if __name__ == "__main__":
    main()
