//! The ternary types TQ1_0 and TQ2_0: values in {-1, 0, 1} times one f16 scale per 256.
//!
//! TQ2_0 stores each trit in 2 bits. TQ1_0 packs 5 trits per byte as a base-3 fixed-point
//! fraction (`byte = ceil(n * 256 / 243)` for the base-3 number `n`), so trit `k` of a byte is
//! read by multiplying by `3^k` (wrapping in u8) and taking the top "digit": `(q * 3) >> 8`.
//!
//! Both follow ggml's `quantize_row_tq*_0_ref` / `dequantize_row_tq*_0` exactly: the scale is the
//! absolute maximum, trits are `lroundf(x / amax)` (ties away from zero).

use super::{for_each_block, quantize_blocks, Kernels};
use crate::blocks::{BlockTQ1_0, BlockTQ2_0, QK_K};
use crate::DType;
use half::f16;

/// The absolute maximum as ggml's `MAX(amax, fabsf(v))` computes it, and its inverse (0 for 0).
fn amax_and_inverse(x: &[f32]) -> (f32, f32) {
    let mut amax = 0f32;
    for &v in x {
        amax = if amax > v.abs() { amax } else { v.abs() };
    }
    (amax, if amax != 0.0 { 1.0 / amax } else { 0.0 })
}

/// `lroundf(x * id) + 1`: the trit of `x` as 0, 1 or 2.
fn trit(x: f32, id: f32) -> u8 {
    ((x * id).round() as i32 + 1) as u8
}

/// Packs trits (first one most significant) as ggml's base-3 fixed-point byte.
fn pack_trits(trits: impl Iterator<Item = u8>) -> u8 {
    let n = trits.fold(0u8, |q, t| q * 3 + t);
    (u16::from(n) * 256).div_ceil(243) as u8
}

/// Trit `k` (0 = most significant) of a TQ1_0 byte, as -1, 0 or 1.
pub(crate) fn unpack_trit(q: u8, k: usize) -> i32 {
    const POW3: [u8; 5] = [1, 3, 9, 27, 81];
    let q = q.wrapping_mul(POW3[k]);
    i32::from((u16::from(q) * 3) >> 8) - 1
}

/// `quantize_row_tq1_0_ref` on one block. Element order: `qs[0..32]` hold elements `m + 32n`
/// (trit n of byte m), `qs[32..48]` elements `160 + m + 16n`, `qh[0..4]` elements `240 + j + 4n`
/// (4 trits, then a zero trit).
fn quantize_tq1_0(x: &[f32; QK_K]) -> BlockTQ1_0 {
    let (d, id) = amax_and_inverse(x);
    let mut qs = [0u8; 48];
    for (m, q) in qs[..32].iter_mut().enumerate() {
        *q = pack_trits((0..5).map(|n| trit(x[m + 32 * n], id)));
    }
    for (m, q) in qs[32..].iter_mut().enumerate() {
        *q = pack_trits((0..5).map(|n| trit(x[160 + m + 16 * n], id)));
    }
    let qh: [u8; 4] = std::array::from_fn(|j| {
        pack_trits((0..4).map(|n| trit(x[240 + j + 4 * n], id)).chain([0]))
    });
    BlockTQ1_0 { qs, qh, d: f16::from_f32(d) }
}

/// `dequantize_row_tq1_0` on one block (the inverse of [`quantize_tq1_0`]'s layout).
fn dequantize_tq1_0(b: &BlockTQ1_0, y: &mut [f32; QK_K]) {
    let d = b.d.to_f32();
    for n in 0..5 {
        for m in 0..32 {
            y[32 * n + m] = unpack_trit(b.qs[m], n) as f32 * d;
        }
        for m in 0..16 {
            y[160 + 16 * n + m] = unpack_trit(b.qs[32 + m], n) as f32 * d;
        }
    }
    for n in 0..4 {
        for j in 0..4 {
            y[240 + 4 * n + j] = unpack_trit(b.qh[j], n) as f32 * d;
        }
    }
}

/// `quantize_row_tq2_0_ref` on one block: per 128 values, byte m holds elements
/// `m + 32n` in bits `2n..2n+2`.
fn quantize_tq2_0(x: &[f32; QK_K]) -> BlockTQ2_0 {
    let (d, id) = amax_and_inverse(x);
    let mut qs = [0u8; 64];
    for (half, qs) in qs.chunks_exact_mut(32).enumerate() {
        let x = &x[128 * half..128 * half + 128];
        for (m, q) in qs.iter_mut().enumerate() {
            *q = (0..4).fold(0, |q, n| q | (trit(x[m + 32 * n], id) & 3) << (2 * n));
        }
    }
    BlockTQ2_0 { qs, d: f16::from_f32(d) }
}

/// `dequantize_row_tq2_0` on one block.
fn dequantize_tq2_0(b: &BlockTQ2_0, y: &mut [f32; QK_K]) {
    let d = b.d.to_f32();
    for (qs, y) in b.qs.chunks_exact(32).zip(y.chunks_exact_mut(128)) {
        for n in 0..4 {
            for m in 0..32 {
                let q = i32::from((qs[m] >> (2 * n)) & 3);
                y[32 * n + m] = (q - 1) as f32 * d;
            }
        }
    }
}

/// This module's entries of the dispatch table.
pub(crate) const KERNELS: &[Kernels] = &[
    Kernels {
        dtype: DType::TQ1_0,
        dequantize: |s, d| for_each_block(s, d, dequantize_tq1_0),
        quantize: Some(|s, d| quantize_blocks(s, d, quantize_tq1_0)),
    },
    Kernels {
        dtype: DType::TQ2_0,
        dequantize: |s, d| for_each_block(s, d, dequantize_tq2_0),
        quantize: Some(|s, d| quantize_blocks(s, d, quantize_tq2_0)),
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trit_packing_round_trips() {
        for n in 0..243u16 {
            let trits: Vec<u8> = (0..5).map(|k| (n / 3u16.pow(4 - k) % 3) as u8).collect();
            let q = pack_trits(trits.iter().copied());
            for (k, &t) in trits.iter().enumerate() {
                assert_eq!(unpack_trit(q, k), i32::from(t) - 1, "n={n} k={k}");
            }
        }
    }
}
