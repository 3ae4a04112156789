#!/usr/bin/env python3
"""Packs llama.cpp's last-prompt-position logits into the compact `.logits.sample` files the
model tests read (testdata/refs/README.md, "Logits files"), and reads them back.

    pack_logits.py DIR... [--keep]

Each DIR holds `fa-on/MODEL/PROMPT.logits.f32` and `fa-off/MODEL/PROMPT.logits.f32` (all
logits, raw little-endian f32, as tools/make_refs.py writes them). For every pair, both modes
get a `PROMPT.logits.sample` beside them (the f32 files are deleted unless --keep): the exact
sum of squares of the vector, the exact NMSE of the other mode's vector against it (so the
test's allowance stays what it was with the full vectors), the top 256 entries, the minimum,
and every `stride`-th value. It prints, per file, the exact other-mode NMSE next to what the
test's estimator and lower bound make of the other mode's full vector.

As a module (tools/ on sys.path): `pack`, `read`, `nmse_estimate`, `nmse_lower_bound`, the
same computations as crates/llama/tests/common/logits_sample.rs.

Format (little-endian):
    magic    8 bytes  b"TSLOGITS"
    version  u32      1
    n_vocab  u32      length of the full vector
    n_top    u32      min(256, n_vocab)
    stride   u32      max(1, n_vocab // 4096)
    sum_sq   f64      sum of ref[i]^2, f64, added in index order
    other    f64      sum of (other[i] - ref[i])^2 / sum_sq, f64, added in index order
    min      f32      the smallest value of the vector
    top      n_top x (u32 index, f32 value), by value descending, ties by index ascending
    sample   ceil(n_vocab / stride) x f32: ref[0], ref[stride], ref[2 * stride], ...
"""
import argparse, glob, os, struct, sys
import numpy as np

MAGIC = b"TSLOGITS"
VERSION = 1
TOP = 256
SAMPLES = 4096
_HEAD = struct.Struct("<8sIIIIddf")


def stride_for(n):
    return max(1, n // SAMPLES)


def seq_sum(x):
    """Sum of a float64 array added in index order (as the Rust test adds), not pairwise."""
    return float(np.cumsum(x)[-1]) if len(x) else 0.0


def nmse_exact(a, b):
    """The old test's NMSE: sum of (a - b)^2 over sum of b^2, f64, in index order."""
    d = a.astype(np.float64) - b.astype(np.float64)
    bb = b.astype(np.float64)
    return seq_sum(d * d) / seq_sum(bb * bb)


def pack(ref, other):
    """The `.logits.sample` bytes of `ref` (f32 vector), with `other` the other mode's."""
    ref = np.ascontiguousarray(ref, dtype="<f4")
    other = np.ascontiguousarray(other, dtype="<f4")
    assert ref.shape == other.shape and ref.ndim == 1, (ref.shape, other.shape)
    assert np.isfinite(ref).all() and np.isfinite(other).all()
    n = len(ref)
    n_top = min(TOP, n)
    stride = stride_for(n)
    r64 = ref.astype(np.float64)
    sum_sq = seq_sum(r64 * r64)
    order = np.lexsort((np.arange(n), -r64))[:n_top]
    top = np.empty(n_top, dtype=[("i", "<u4"), ("v", "<f4")])
    top["i"] = order
    top["v"] = ref[order]
    head = _HEAD.pack(MAGIC, VERSION, n, n_top, stride, sum_sq, nmse_exact(other, ref),
                      float(ref.min()))
    return head + top.tobytes() + ref[::stride].tobytes()


def read(path_or_bytes):
    """A `.logits.sample` file as a dict: n_vocab, stride, sum_sq, other_nmse, min,
    top_index, top_value, sample (numpy arrays)."""
    b = path_or_bytes if isinstance(path_or_bytes, bytes) else open(path_or_bytes, "rb").read()
    magic, version, n, n_top, stride, sum_sq, other, mn = _HEAD.unpack_from(b)
    if magic != MAGIC or version != VERSION:
        raise ValueError(f"not a version-{VERSION} logits sample file")
    off = _HEAD.size
    top = np.frombuffer(b, dtype=[("i", "<u4"), ("v", "<f4")], count=n_top, offset=off)
    off += 8 * n_top
    n_sample = -(-n // stride)
    sample = np.frombuffer(b, dtype="<f4", count=n_sample, offset=off)
    if off + 4 * n_sample != len(b):
        raise ValueError("logits sample file: wrong length")
    return {"n_vocab": n, "stride": stride, "sum_sq": sum_sq, "other_nmse": other, "min": mn,
            "top_index": top["i"].astype(np.int64), "top_value": top["v"], "sample": sample}


def _strata(s, got):
    got = np.asarray(got, dtype=np.float32)
    assert len(got) == s["n_vocab"], (len(got), s["n_vocab"])
    g = got.astype(np.float64)
    d_top = g[s["top_index"]] - s["top_value"].astype(np.float64)
    in_top = np.zeros(s["n_vocab"], dtype=bool)
    in_top[s["top_index"]] = True
    idx = np.arange(0, s["n_vocab"], s["stride"])
    keep = ~in_top[idx]
    d_rest = g[idx[keep]] - s["sample"][keep].astype(np.float64)
    return g, in_top, idx[keep], seq_sum(d_top * d_top), seq_sum(d_rest * d_rest), keep.sum()


def nmse_estimate(s, got):
    """The test's estimate of the full NMSE of `got` against the packed reference: the top
    entries exactly, the other entries by their strided sample scaled to their number."""
    _, _, _, top, rest, m = _strata(s, got)
    n_rest = s["n_vocab"] - len(s["top_index"])
    return (top + (rest * n_rest / m if m else 0.0)) / s["sum_sq"]


def nmse_lower_bound(s, got):
    """A bound the full NMSE cannot be below: stored entries exactly, every other entry by its
    distance to [min, smallest top value], the interval its reference value lies in."""
    g, in_top, sampled, top, rest, _ = _strata(s, got)
    unknown = ~in_top
    unknown[sampled] = False
    lo, hi = float(s["min"]), float(s["top_value"][-1])
    u = g[unknown]
    d = np.maximum(lo - u, 0.0) + np.maximum(u - hi, 0.0)
    return (top + rest + seq_sum(d * d)) / s["sum_sq"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dirs", nargs="+")
    ap.add_argument("--keep", action="store_true", help="keep the .logits.f32 files")
    a = ap.parse_args()
    for d in a.dirs:
        on = sorted(glob.glob(os.path.join(d, "fa-on", "*", "*.logits.f32")))
        if not on:
            sys.exit(f"{d}: no fa-on/*/*.logits.f32")
        for f_on in on:
            f_off = f_on.replace(os.sep + "fa-on" + os.sep, os.sep + "fa-off" + os.sep)
            v = {"fa-on": np.fromfile(f_on, dtype="<f4"), "fa-off": np.fromfile(f_off, dtype="<f4")}
            for mode, other in (("fa-on", "fa-off"), ("fa-off", "fa-on")):
                src = f_on if mode == "fa-on" else f_off
                out = src[: -len(".f32")] + ".sample"
                data = pack(v[mode], v[other])
                s = read(data)
                assert s["other_nmse"] == nmse_exact(v[other], v[mode])
                assert nmse_estimate(s, v[mode]) == 0.0 and nmse_lower_bound(s, v[mode]) == 0.0
                with open(out, "wb") as f:
                    f.write(data)
                print(f"{os.path.relpath(out, d)}: {len(data)} bytes; other mode NMSE exact "
                      f"{s['other_nmse']:.3e}, estimated {nmse_estimate(s, v[other]):.3e}, "
                      f"lower bound {nmse_lower_bound(s, v[other]):.3e}")
            if not a.keep:
                os.remove(f_on)
                os.remove(f_off)


if __name__ == "__main__":
    main()
