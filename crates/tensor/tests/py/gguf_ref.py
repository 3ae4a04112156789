#!/usr/bin/env python3
"""Reference quantize/dequantize through the `gguf` package's numpy code, for the conformance
tests. Usage:
  gguf_ref.py quantize TYPE IN.f32 OUT.bin      (raw little-endian f32 in, block bytes out)
  gguf_ref.py dequantize TYPE IN.bin OUT.f32
  gguf_ref.py types                              (prints the types it can quantize, one a line)
TYPE is ggml's type name as gguf.GGMLQuantizationType spells it (Q4_0, IQ4_NL, BF16, ...)."""
import sys
import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import quants

def main() -> None:
    op = sys.argv[1]
    if op == "types":
        for t in T:
            try:
                quants.quantize(np.zeros((1, 256), dtype=np.float32), t)
                print(t.name)
            except Exception:
                pass
        return
    t = T[sys.argv[2]]
    src, dst = sys.argv[3], sys.argv[4]
    if op == "quantize":
        x = np.fromfile(src, dtype="<f4")
        out = quants.quantize(x.reshape(1, -1), t)
        np.asarray(out).tofile(dst)
    elif op == "dequantize":
        b = np.fromfile(src, dtype=np.uint8)
        out = quants.dequantize(b.reshape(1, -1), t)
        np.asarray(out, dtype="<f4").tofile(dst)
    else:
        sys.exit(f"unknown op {op}")

if __name__ == "__main__":
    main()
