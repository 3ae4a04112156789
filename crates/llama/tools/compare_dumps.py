#!/usr/bin/env python3
"""Compares Tessera's tensor dumps with llama.cpp's, layer by layer, in graph order.

Usage: compare_dumps.py LLAMA_CPP.npz TESSERA_DIR N_LAYER
Prints the first tensor whose values differ, or "all equal" (a zero's sign is not counted:
-0.0 and +0.0 behave the same in every later product and sum). Where
llama.cpp kept only the last rows of a tensor (the output rows of the last layer), those rows
are compared."""
import os, sys
import numpy as np

ref = np.load(sys.argv[1])
ours_dir, n_layer = sys.argv[2], int(sys.argv[3])
names = ["attn_norm", "Qcur", "Kcur", "kq", "kq_soft_max", "kqv", "kqv_out", "attn_post_norm", "sa_out", "ffn_inp",
         "ffn_norm", "ffn_up", "ffn_gate", "ffn_geglu", "ffn_swiglu", "ffn_out", "ffn_post_norm",
         "l_out"]


def last(key):
    """The last occurrence of `key` in llama.cpp's dump (views repeat names)."""
    if key not in ref:
        return None
    i = 1
    while f"{key}#{i}" in ref:
        i += 1
    return key if i == 1 else f"{key}#{i - 1}"


checked = 0
order = [f"{n}-{il}" for il in range(n_layer) for n in names] + ["result_norm", "result_output"]
for key in order:
    path = os.path.join(ours_dir, f"{key}.f32")
    k = last(key)
    if k is None or not os.path.exists(path):
        continue
    ours, theirs = np.fromfile(path, dtype=np.float32), ref[k].ravel()
    if ours.size != theirs.size:
        if ours.size % theirs.size:
            print(f"{key}: sizes {ours.size} vs {theirs.size}")
            sys.exit(1)
        ours = ours[-theirs.size:]
    checked += 1
    if not np.array_equal(ours, theirs, equal_nan=True):
        diff = ours != theirs
        print(f"{key}: {diff.sum()} of {ours.size} differ, max |diff| {np.abs(ours - theirs).max():.3g}")
        sys.exit(1)
print(f"all equal ({checked} tensors)")
