#!/usr/bin/env python3
"""Dequantizes named tensors of a GGUF file with the `gguf` package; writes raw f32 per tensor.
Usage: dequant_tensor.py FILE.gguf OUTDIR NAME..."""
import os, sys
import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize

r = GGUFReader(sys.argv[1])
want = set(sys.argv[3:])
for t in r.tensors:
    if t.name in want:
        a = dequantize(t.data, t.tensor_type).astype("<f4")
        a.tofile(os.path.join(sys.argv[2], t.name + ".f32"))
