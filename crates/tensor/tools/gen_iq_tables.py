#!/usr/bin/env python3
"""Generates crates/tensor/src/quant/iq_tables.rs: the i-quant grid and sign tables of ggml
(ggml/src/ggml-common.h), rebuilt from the data in the installed `gguf` package's quants.py
(each class's `grid_hex` / `grid_map` / `grid_shape`, `IQ2_XXS.ksigns`, `IQ1_S.delta`).

quants.py stores every grid entry packed: each element is an index (2 or 3 bits, low bits first)
into `grid_map`, and the bytes are written as hexadecimal text. ggml stores the same entries as
one u64 (8 bytes) or u32 (4 bytes) per entry, element 0 in the lowest byte. This script unpacks
the indexes, maps them through `grid_map` and packs them as ggml does.

Usage:
  python3 crates/tensor/tools/gen_iq_tables.py [--check path/to/ggml-common.h] [--out FILE]

With --check, every generated table is also compared entry by entry with the C tables of a
ggml-common.h (e.g. from the llama.cpp sources that llama-cpp-python vendors) and the script
fails on any difference.
"""
from __future__ import annotations

import argparse
import re
import sys
from importlib.metadata import version
from math import ceil, log2
from pathlib import Path

from gguf import quants

OUT = Path(__file__).resolve().parent.parent / "src" / "quant" / "iq_tables.rs"

# (Rust name, ggml name, quants.py class, element type of one entry)
GRIDS = [
    ("IQ2XXS_GRID", "iq2xxs_grid", quants.IQ2_XXS, "u64"),
    ("IQ2XS_GRID", "iq2xs_grid", quants.IQ2_XS, "u64"),
    ("IQ2S_GRID", "iq2s_grid", quants.IQ2_S, "u64"),
    ("IQ3XXS_GRID", "iq3xxs_grid", quants.IQ3_XXS, "u32"),
    ("IQ3S_GRID", "iq3s_grid", quants.IQ3_S, "u32"),
    ("IQ1S_GRID", "iq1s_grid", quants.IQ1_S, "u64"),
]


def unpack_grid(cls) -> list[int]:
    """The grid of `cls` as ggml's integers: one per entry, element j in byte j."""
    n_entries, n_elems = cls.grid_shape
    bits = ceil(log2(len(cls.grid_map)))
    per_byte = 8 // bits
    shifts = list(range(0, 8, 8 // per_byte))
    raw = bytes.fromhex(cls.grid_hex.decode("ascii"))
    indexes = [(b >> s) & ((1 << bits) - 1) for b in raw for s in shifts]
    assert len(indexes) == n_entries * n_elems, cls.__name__
    out = []
    for e in range(n_entries):
        value = 0
        for j in range(n_elems):
            byte = int(cls.grid_map[indexes[e * n_elems + j]]) & 0xFF  # -1 -> 0xff (int8)
            value |= byte << (8 * j)
        out.append(value)
    return out


def c_table(text: str, name: str) -> list[int]:
    """The values of `GGML_TABLE_BEGIN(type, name, size) ... GGML_TABLE_END()` in C source."""
    m = re.search(r"GGML_TABLE_BEGIN\(\s*\w+\s*,\s*" + name + r"\s*,[^)]*\)(.*?)GGML_TABLE_END\(\)", text, re.S)
    if not m:
        sys.exit(f"table {name} not found in the C header")
    body = re.sub(r"//[^\n]*", "", m.group(1))
    return [int(tok, 0) for tok in re.findall(r"-?(?:0x[0-9a-fA-F]+|\d+)", body)]


def fmt_table(name: str, ty: str, values: list[int], doc: str, per_line: int, width: int) -> str:
    lines = [f"/// {doc}", f"pub static {name}: [{ty}; {len(values)}] = ["]
    for i in range(0, len(values), per_line):
        chunk = values[i : i + per_line]
        if width:
            lines.append("    " + " ".join(f"0x{v:0{width}x}," for v in chunk))
        else:
            lines.append("    " + " ".join(f"{v}," for v in chunk))
    lines.append("];")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", type=Path, help="ggml-common.h to compare every table with")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()

    tables: dict[str, tuple[str, str, list[int]]] = {}  # ggml name -> (Rust name, type, values)
    for rust, ggml, cls, ty in GRIDS:
        tables[ggml] = (rust, ty, unpack_grid(cls))
    ksigns = list(quants.IQ2_XXS.ksigns)
    assert len(ksigns) == 128
    tables["ksigns_iq2xs"] = ("KSIGNS_IQ2XS", "u8", ksigns)
    # Not data in quants.py: bit j selects the sign of element j (quants.py shifts by j instead).
    tables["kmask_iq2xs"] = ("KMASK_IQ2XS", "u8", [1 << j for j in range(8)])
    delta = float(quants.IQ1_S.delta)

    if args.check:
        text = args.check.read_text()
        for ggml, (_, ty, values) in tables.items():
            mask = (1 << (8 * {"u8": 1, "u32": 4, "u64": 8}[ty])) - 1
            c_values = [v & mask for v in c_table(text, ggml)]
            if c_values != values:
                bad = next(i for i, (a, b) in enumerate(zip(c_values, values)) if a != b) if len(c_values) == len(values) else "length"
                sys.exit(f"{ggml} differs from {args.check} (first at {bad})")
        m = re.search(r"#define\s+IQ1S_DELTA\s+([0-9.]+)f", text)
        if not m or float(m.group(1)) != delta:
            sys.exit("IQ1S_DELTA differs")
        print(f"all {len(tables)} tables and IQ1S_DELTA match {args.check}", file=sys.stderr)

    docs = {
        "iq2xxs_grid": "`iq2xxs_grid`: 256 entries of 8 magnitudes (0x08, 0x19, 0x2b), element j in byte j.",
        "iq2xs_grid": "`iq2xs_grid`: 512 entries of 8 magnitudes (0x08, 0x19, 0x2b).",
        "iq2s_grid": "`iq2s_grid`: 1024 entries of 8 magnitudes (0x08, 0x19, 0x2b).",
        "iq3xxs_grid": "`iq3xxs_grid`: 256 entries of 4 magnitudes (4, 12, ..., 62), element j in byte j.",
        "iq3s_grid": "`iq3s_grid`: 512 entries of 4 odd magnitudes (1..15).",
        "iq1s_grid": "`iq1s_grid`: 2048 entries of 8 values in {-1, 0, 1} (as i8 bytes).",
        "ksigns_iq2xs": "`ksigns_iq2xs`: 7 sign bits plus an eighth that makes the count of minus signs even.",
        "kmask_iq2xs": "`kmask_iq2xs`: the bit of element j in a sign byte.",
    }
    out = [
        "// @generated by crates/tensor/tools/gen_iq_tables.py from the `gguf` package "
        f"{version('gguf')} (gguf/quants.py). Do not edit by hand: rerun the script.",
        "//! ggml's i-quant lookup tables (`ggml-common.h`), rebuilt from the `gguf` package's copy.",
        "",
        "/// `IQ1S_DELTA` (also `IQ1M_DELTA`): the shift added to every IQ1_S / IQ1_M grid value.",
        f"pub const IQ1S_DELTA: f32 = {delta!r};",
        "",
    ]
    for ggml in ["kmask_iq2xs", "ksigns_iq2xs"] + [g for _, g, _, _ in GRIDS]:
        rust, ty, values = tables[ggml]
        width, per_line = {"u8": (0, 16), "u32": (8, 8), "u64": (16, 4)}[ty]
        out.append(fmt_table(rust, ty, values, docs[ggml], per_line, width))
        out.append("")
    args.out.write_text("\n".join(out))
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
