#!/usr/bin/env python3
"""Writes ggml's own quantized bytes for the K-quants (and the legacy 32-wide types) into
crates/tensor/tests/fixtures/ggml_kquants/, for tests/quant_legacy_kquants.rs.

How: a tiny llama-architecture GGUF with F32 2-D weights is written with the `gguf` package,
then quantized by llama.cpp itself (`llama_cpp.llama_model_quantize`, the C API behind
llama-quantize) once per type with `pure = True`, so every 2-D weight gets exactly that type.
Without an importance matrix ggml's `quantize_*` for these types runs the reference
quantizers (`quantize_row_*_ref`), which Tessera reproduces.

Needs: pip install gguf numpy llama-cpp-python==0.3.36   (the latter builds llama.cpp, ~7 min)
Usage: python3 crates/tensor/tools/make_kquant_fixtures.py [OUT_DIR]

Output (all little-endian): NAME.f32 (the input rows), NAME.TYPE (the quantized rows, ggml's
bytes) for each tensor NAME, and manifest.json listing tensors, shapes, types and versions.
"""
import importlib.metadata
import json
import os
import sys
import tempfile

import numpy as np
import gguf
import llama_cpp

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(HERE, "..", "tests", "fixtures", "ggml_kquants")

# (type name as gguf.GGMLQuantizationType spells it, llama_ftype). The _S variants of the
# K-quants are used because with `pure` every weight gets the ftype's base type.
TYPES = [
    ("Q2_K", 10),  # LLAMA_FTYPE_MOSTLY_Q2_K
    ("Q3_K", 11),  # LLAMA_FTYPE_MOSTLY_Q3_K_S
    ("Q4_K", 14),  # LLAMA_FTYPE_MOSTLY_Q4_K_S
    ("Q5_K", 16),  # LLAMA_FTYPE_MOSTLY_Q5_K_S
    ("Q6_K", 18),  # LLAMA_FTYPE_MOSTLY_Q6_K
    ("Q4_0", 2),
    ("Q4_1", 3),
    ("Q5_0", 8),
    ("Q5_1", 9),
    ("Q8_0", 7),
    ("IQ4_NL", 25),  # LLAMA_FTYPE_MOSTLY_IQ4_NL (no importance matrix)
    ("IQ4_XS", 30),  # LLAMA_FTYPE_MOSTLY_IQ4_XS
    ("TQ1_0", 36),
    ("TQ2_0", 37),
    ("MXFP4", 38),  # LLAMA_FTYPE_MOSTLY_MXFP4_MOE; with `pure` every weight is MXFP4
    ("F16", 1),
    ("BF16", 32),
]

N_EMBD = 512


def row(kind: str, n: int, rng: np.random.Generator) -> np.ndarray:
    """One row of a kind that catches quantizer bugs (the kinds of tests/support test_rows,
    plus Gaussian, heavy-tailed and on-grid data that hits rounding ties)."""
    i = np.arange(n)
    if kind == "uniform":
        x = rng.uniform(-1, 1, n)
    elif kind == "wide":
        x = rng.uniform(-100, 100, n)
    elif kind == "outliers":
        x = np.where(i % 37 == 0, rng.uniform(-50, 50, n), rng.uniform(-0.5, 0.5, n))
    elif kind == "zeros":
        x = np.zeros(n)
    elif kind == "tiny":
        x = rng.uniform(-1e-6, 1e-6, n)
    elif kind == "constant":
        x = (i // 32) * 0.25 - 1.0
    elif kind == "negative":
        x = rng.uniform(-3.0, -0.1, n)
    elif kind == "cosine":
        x = 0.1 + 2.0 * np.cos(i.astype(np.float32))
    elif kind == "gaussian":
        x = rng.normal(0, 0.02, n)
    elif kind == "heavy":
        x = rng.standard_t(3, n) * 0.05
    elif kind == "grid":
        x = rng.integers(-16, 17, n) / 8.0
    elif kind == "sparse":
        x = np.where(rng.uniform(0, 1, n) < 0.9, 0.0, rng.normal(0, 1, n))
    else:
        raise ValueError(kind)
    return x.astype(np.float32)


KINDS = ["uniform", "wide", "outliers", "zeros", "tiny", "constant", "negative", "cosine",
         "gaussian", "heavy", "grid", "sparse"]


def tensors() -> dict:
    """Deterministic F32 weights: every kind in every tensor, rows of 512 and 1024."""
    rng = np.random.default_rng(20240611)
    shapes = {
        "blk.0.attn_q.weight": (24, N_EMBD),
        "blk.0.attn_k.weight": (24, N_EMBD),
        "blk.0.attn_v.weight": (12, 2 * N_EMBD),
        "blk.0.ffn_up.weight": (24, N_EMBD),
    }
    out = {}
    for name, (rows, cols) in shapes.items():
        out[name] = np.stack([row(KINDS[r % len(KINDS)], cols, rng) for r in range(rows)])
    return out


def write_input(path: str, weights: dict) -> None:
    w = gguf.GGUFWriter(path, "llama")
    w.add_context_length(256)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(1)
    w.add_feed_forward_length(N_EMBD)
    w.add_head_count(8)
    w.add_head_count_kv(8)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(N_EMBD // 8)
    w.add_file_type(0)  # ALL_F32
    for name, x in weights.items():
        w.add_tensor(name, x)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def quantize(src: str, dst: str, ftype: int) -> None:
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = ftype
    params.pure = True
    rc = llama_cpp.llama_model_quantize(src.encode(), dst.encode(), params)
    if rc != 0:
        sys.exit(f"llama_model_quantize(ftype={ftype}) failed with {rc}")


def main() -> None:
    out_dir = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else DEFAULT_OUT)
    os.makedirs(out_dir, exist_ok=True)
    weights = tensors()
    manifest = {
        "generator": "crates/tensor/tools/make_kquant_fixtures.py",
        "llama_cpp_python": llama_cpp.__version__,
        "gguf": importlib.metadata.version("gguf"),
        "tensors": [],
        "types": [t for t, _ in TYPES],
    }
    for name, x in weights.items():
        x.astype("<f4").tofile(os.path.join(out_dir, f"{name}.f32"))
        manifest["tensors"].append({"name": name, "rows": x.shape[0], "cols": x.shape[1]})

    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "f32.gguf")
        write_input(src, weights)
        for type_name, ftype in TYPES:
            dst = os.path.join(tmp, f"{type_name}.gguf")
            quantize(src, dst, ftype)
            want = gguf.GGMLQuantizationType[type_name]
            found = set()
            for t in gguf.GGUFReader(dst).tensors:
                if t.name not in weights:
                    continue
                if t.tensor_type != want:
                    sys.exit(f"{t.name}: got {t.tensor_type.name}, wanted {type_name}")
                data = np.asarray(t.data).tobytes()
                rows, cols = weights[t.name].shape
                block, size = gguf.GGML_QUANT_SIZES[want]
                assert len(data) == rows * cols // block * size, (t.name, type_name)
                with open(os.path.join(out_dir, f"{t.name}.{type_name}"), "wb") as f:
                    f.write(data)
                found.add(t.name)
            if found != set(weights):
                sys.exit(f"{type_name}: missing tensors {set(weights) - found}")

    with open(os.path.join(out_dir, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")
    total = sum(os.path.getsize(os.path.join(out_dir, p)) for p in os.listdir(out_dir))
    print(f"wrote {len(os.listdir(out_dir))} files, {total} bytes, to {out_dir}")


if __name__ == "__main__":
    main()
