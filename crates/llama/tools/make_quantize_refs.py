#!/usr/bin/env python3
"""llama.cpp's quantizer output for the synthetic models, as per-tensor (type, sha256):
the fixture tests/quantize.rs compares tessera_llama::quantize with.
Usage: make_quantize_refs.py SYNTH_DIR OUT.json  (SYNTH_DIR from `cargo xtask synth-models`;
needs llama-cpp-python 0.3.36 = llama.cpp b11312 and the gguf package)."""
import ctypes, hashlib, json, os, sys, tempfile
import llama_cpp
from gguf import GGUFReader

FTYPES = {"Q4_0": 2, "Q5_1": 9, "Q8_0": 7, "Q2_K": 10, "Q3_K_M": 12, "Q3_K_L": 13, "Q4_K_S": 14,
          "Q4_K_M": 15, "Q5_K_S": 16, "Q5_K_M": 17, "Q6_K": 18, "IQ4_NL": 25, "IQ4_XS": 30, "TQ2_0": 37}
CASES = {"synth-gpt2-f16": ["Q4_0", "Q8_0", "Q3_K_M", "Q4_K_S", "Q4_K_M", "Q5_K_S", "Q5_K_M", "Q6_K"],
         "synth-qwen3-q8_0": ["Q5_1", "Q2_K", "Q3_K_L", "Q4_K_M", "IQ4_NL", "IQ4_XS", "TQ2_0"]}
synth, out = sys.argv[1], sys.argv[2]
res = {}
with tempfile.TemporaryDirectory() as d:
    for stem, types in CASES.items():
        for t in types:
            p = llama_cpp.llama_model_quantize_default_params()
            p.ftype = FTYPES[t]; p.allow_requantize = True; p.nthread = 2
            dst = os.path.join(d, f"{stem}-{t}.gguf")
            assert llama_cpp.llama_model_quantize(os.path.join(synth, stem + ".gguf").encode(), dst.encode(), ctypes.byref(p)) == 0
            res[f"{stem}/{t}"] = {x.name: [x.tensor_type.name, hashlib.sha256(bytes(x.data)).hexdigest()] for x in GGUFReader(dst).tensors}
json.dump(res, open(out, "w"), indent=0, sort_keys=True)
