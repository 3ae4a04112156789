#!/usr/bin/env python3
"""llama.cpp's intermediate tensors of one decode, through its eval callback.

Usage: llama_cpp_dump.py MODEL.gguf TOKENS_JSON FLASH_ATTN(0|1) N_FIRST OUT.npz
The first N_FIRST tokens are decoded as one batch (not recorded), the rest as a second one
(N_FIRST = the number of tokens: one batch, recorded); every F32 tensor the graph computes is
saved under its name (repeats get #1, #2, ...). Pair with the dump_tensors example of
tessera-llama and compare_dumps.py. Needs llama-cpp-python 0.3.36 (llama.cpp b11312); weights
are kept out of the AMX/repack buffers unless REPACK=1 (llama.cpp's default repacked weights;
never on a CPU with AMX, whose path crashes: testdata/refs/README.md)."""
import ctypes, json, os, sys
import numpy as np
import llama_cpp
import llama_cpp.llama as _L
from llama_cpp import Llama

_orig = llama_cpp.llama_model_default_params
def _params():
    # REPACK=1: llama.cpp's default repacked weights (never on an AMX CPU: it crashes there).
    p = _orig(); p.use_extra_bufts = os.environ.get("REPACK") == "1"; return p
llama_cpp.llama_model_default_params = _params
_L.llama_cpp.llama_model_default_params = _params

model, toks, fa, first, out = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
first = min(first, len(toks))
dumps = {}

@ctypes.CFUNCTYPE(ctypes.c_bool, ctypes.c_void_p, ctypes.c_bool, ctypes.c_void_p)
def callback(t, ask, _):
    if ask:
        return True
    # struct ggml_tensor: type @0, ne[4] @16, nb[4] @48, data @248, name[64] @256.
    b = ctypes.string_at(t, 320)
    typ = int.from_bytes(b[0:4], "little")
    ne = [int.from_bytes(b[16 + 8 * i:24 + 8 * i], "little", signed=True) for i in range(4)]
    nb = [int.from_bytes(b[48 + 8 * i:56 + 8 * i], "little") for i in range(4)]
    data = int.from_bytes(b[248:256], "little")
    name = b[256:320].split(b"\0")[0].decode()
    if typ == 0 and data and nb[0] == 4 and nb[1] == 4 * ne[0]:
        n = ne[0] * ne[1] * ne[2] * ne[3]
        key, i = name, 1
        while key in dumps:
            key, i = f"{name}#{i}", i + 1
        dumps[key] = np.ctypeslib.as_array((ctypes.c_float * n).from_address(data)).copy()
    return True

llm = Llama(model_path=model, n_ctx=512, n_batch=512, n_ubatch=512, n_threads=2, verbose=False)
params = llama_cpp.llama_context_default_params()
params.n_ctx = max(512, -(-len(toks) // 256) * 256)
params.n_batch = params.n_ubatch = 512
params.n_threads = params.n_threads_batch = 2
params.cb_eval = callback
params.flash_attn_type = fa
ctx = llama_cpp.llama_init_from_model(llm._model.model, params)
for part in ([toks[:first], toks[first:]] if first < len(toks) else [toks]):
    dumps.clear()
    arr = (llama_cpp.llama_token * len(part))(*part)
    assert llama_cpp.llama_decode(ctx, llama_cpp.llama_batch_get_one(arr, len(part))) == 0
np.savez(out, **dumps)
print(f"{len(dumps)} tensors in {out}")
