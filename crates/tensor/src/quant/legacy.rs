//! The 32-wide "legacy" types: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and Q8_1.
//!
//! The quantizers reproduce ggml's reference quantizers (`quantize_row_q4_0_ref` …
//! `quantize_row_q8_1_ref` in `ggml-quants.c`) byte for byte. The details that decide bits:
//!
//! - the inverse scale is `id = 1/d` computed from the f32 `d` (not from its f16 rounding), and
//!   `0` when `d` is zero;
//! - Q4_0/Q4_1/Q5_0/Q5_1 round by adding `.5` and truncating (`(int8_t)(x + 8.5f)`, then
//!   `MIN(15, ·)`); Q8_0/Q8_1 use `roundf` (ties away from zero), which is [`f32::round`];
//! - f32 → f16 rounds to nearest even;
//! - "symmetric" types (Q4_0, Q5_0) take the signed value of largest magnitude (the first one
//!   on ties) and divide it by `-8` / `-16`, so that value maps to quant 0.

use super::{for_each_block, quantize_blocks, Kernels};
use crate::blocks::{BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, BlockQ8_0, BlockQ8_1};
use crate::DType;
use half::f16;

/// Elements per block of every type in this module.
const QK: usize = 32;
/// Half a block: byte `j` of `qs` holds elements `j` (low nibble) and `j + 16` (high nibble).
const HALF: usize = QK / 2;

/// The value of largest magnitude, with its sign (the first one wins ties; 0 for all zeros).
fn signed_absmax(x: &[f32]) -> f32 {
    let (mut amax, mut max) = (0f32, 0f32);
    for &v in x {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    max
}

/// The smallest and largest value of `x`, as ggml's `FLT_MAX`-seeded loop finds them.
fn min_max(x: &[f32]) -> (f32, f32) {
    let (mut min, mut max) = (f32::MAX, -f32::MAX);
    for &v in x {
        if v < min {
            min = v;
        }
        if v > max {
            max = v;
        }
    }
    (min, max)
}

/// `1/d`, or 0 when `d` is 0.
fn inverse(d: f32) -> f32 {
    if d != 0.0 {
        1.0 / d
    } else {
        0.0
    }
}

/// C's `(int8_t)v` for the in-range values these quantizers produce (truncation toward zero).
fn trunc_i8(v: f32) -> i8 {
    v as i8
}

/// The 32 fifth bits of Q5_0/Q5_1, bit `j` for element `j`, as little-endian bytes.
fn pack_high_bits(q: &[u8; QK]) -> [u8; 4] {
    let qh = q.iter().enumerate().fold(0u32, |acc, (j, &v)| acc | (u32::from(v >> 4) << j));
    qh.to_le_bytes()
}

/// Low nibbles of elements `j` and `j + 16` packed into byte `j`.
fn pack_nibbles(q: &[u8; QK]) -> [u8; HALF] {
    std::array::from_fn(|j| (q[j] & 0x0F) | ((q[j + HALF] & 0x0F) << 4))
}

/// Element `j` of a 4-bit block (`0..16`).
fn nibble(qs: &[u8; HALF], j: usize) -> u8 {
    if j < HALF {
        qs[j] & 0x0F
    } else {
        qs[j - HALF] >> 4
    }
}

/// Element `j` of a 5-bit block (`0..32`): its nibble plus the fifth bit from `qh`.
fn five_bits(qs: &[u8; HALF], qh: [u8; 4], j: usize) -> u8 {
    let high = ((u32::from_le_bytes(qh) >> j) & 1) as u8;
    nibble(qs, j) | (high << 4)
}

/// `quantize_row_q4_0_ref` for one block.
fn quantize_q4_0(x: &[f32; QK]) -> BlockQ4_0 {
    let d = signed_absmax(x) / -8.0;
    let id = inverse(d);
    let q: [u8; QK] = std::array::from_fn(|j| trunc_i8(x[j] * id + 8.5).min(15) as u8);
    BlockQ4_0 { d: f16::from_f32(d), qs: pack_nibbles(&q) }
}

/// `quantize_row_q4_1_ref` for one block.
fn quantize_q4_1(x: &[f32; QK]) -> BlockQ4_1 {
    let (min, max) = min_max(x);
    let d = (max - min) / 15.0;
    let id = inverse(d);
    let q: [u8; QK] = std::array::from_fn(|j| trunc_i8((x[j] - min) * id + 0.5).min(15) as u8);
    BlockQ4_1 { d: f16::from_f32(d), m: f16::from_f32(min), qs: pack_nibbles(&q) }
}

/// `quantize_row_q5_0_ref` for one block.
fn quantize_q5_0(x: &[f32; QK]) -> BlockQ5_0 {
    let d = signed_absmax(x) / -16.0;
    let id = inverse(d);
    let q: [u8; QK] = std::array::from_fn(|j| trunc_i8(x[j] * id + 16.5).min(31) as u8);
    BlockQ5_0 { d: f16::from_f32(d), qh: pack_high_bits(&q), qs: pack_nibbles(&q) }
}

/// `quantize_row_q5_1_ref` for one block (no `MIN(31, ·)` here, as in ggml: the value cannot
/// exceed 31 for finite input).
fn quantize_q5_1(x: &[f32; QK]) -> BlockQ5_1 {
    let (min, max) = min_max(x);
    let d = (max - min) / 31.0;
    let id = inverse(d);
    let q: [u8; QK] = std::array::from_fn(|j| ((x[j] - min) * id + 0.5) as u8);
    BlockQ5_1 {
        d: f16::from_f32(d),
        m: f16::from_f32(min),
        qh: pack_high_bits(&q),
        qs: pack_nibbles(&q),
    }
}

/// The scale and `roundf` quants shared by Q8_0 and Q8_1: `d = amax/127`.
fn quantize_q8(x: &[f32; QK]) -> (f32, [i8; QK]) {
    let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
    let d = amax / 127.0;
    let id = inverse(d);
    (d, std::array::from_fn(|j| (x[j] * id).round() as i8))
}

/// `quantize_row_q8_0_ref` for one block.
fn quantize_q8_0(x: &[f32; QK]) -> BlockQ8_0 {
    let (d, qs) = quantize_q8(x);
    BlockQ8_0 { d: f16::from_f32(d), qs }
}

/// `quantize_row_q8_1_ref` for one block: also stores `s = sum(q) * d` (with the f32 `d`).
fn quantize_q8_1(x: &[f32; QK]) -> BlockQ8_1 {
    let (d, qs) = quantize_q8(x);
    let sum: i32 = qs.iter().map(|&q| i32::from(q)).sum();
    BlockQ8_1 { d: f16::from_f32(d), s: f16::from_f32(sum as f32 * d), qs }
}

/// `dequantize_row_q4_0` for one block: `x = d·(q - 8)`.
fn dequantize_q4_0(b: &BlockQ4_0, y: &mut [f32; QK]) {
    let d = b.d.to_f32();
    for (j, y) in y.iter_mut().enumerate() {
        *y = (i32::from(nibble(&b.qs, j)) - 8) as f32 * d;
    }
}

/// `dequantize_row_q4_1` for one block: `x = d·q + m`.
fn dequantize_q4_1(b: &BlockQ4_1, y: &mut [f32; QK]) {
    let (d, m) = (b.d.to_f32(), b.m.to_f32());
    for (j, y) in y.iter_mut().enumerate() {
        *y = f32::from(nibble(&b.qs, j)) * d + m;
    }
}

/// `dequantize_row_q5_0` for one block: `x = d·(q - 16)`.
fn dequantize_q5_0(b: &BlockQ5_0, y: &mut [f32; QK]) {
    let d = b.d.to_f32();
    for (j, y) in y.iter_mut().enumerate() {
        *y = (i32::from(five_bits(&b.qs, b.qh, j)) - 16) as f32 * d;
    }
}

/// `dequantize_row_q5_1` for one block: `x = d·q + m`.
fn dequantize_q5_1(b: &BlockQ5_1, y: &mut [f32; QK]) {
    let (d, m) = (b.d.to_f32(), b.m.to_f32());
    for (j, y) in y.iter_mut().enumerate() {
        *y = f32::from(five_bits(&b.qs, b.qh, j)) * d + m;
    }
}

/// `dequantize_row_q8_0` for one Q8_0 or Q8_1 block: `x = d·q`.
fn dequantize_q8(d: f16, qs: &[i8; QK], y: &mut [f32; QK]) {
    let d = d.to_f32();
    for (y, &q) in y.iter_mut().zip(qs) {
        *y = f32::from(q) * d;
    }
}

/// The kernels of this family, for the dispatcher in `quant`.
pub(crate) const KERNELS: &[Kernels] = &[
    Kernels {
        dtype: DType::Q4_0,
        dequantize: |s, d| for_each_block(s, d, dequantize_q4_0),
        quantize: Some(|s, d| quantize_blocks(s, d, quantize_q4_0)),
    },
    Kernels {
        dtype: DType::Q4_1,
        dequantize: |s, d| for_each_block(s, d, dequantize_q4_1),
        quantize: Some(|s, d| quantize_blocks(s, d, quantize_q4_1)),
    },
    Kernels {
        dtype: DType::Q5_0,
        dequantize: |s, d| for_each_block(s, d, dequantize_q5_0),
        quantize: Some(|s, d| quantize_blocks(s, d, quantize_q5_0)),
    },
    Kernels {
        dtype: DType::Q5_1,
        dequantize: |s, d| for_each_block(s, d, dequantize_q5_1),
        quantize: Some(|s, d| quantize_blocks(s, d, quantize_q5_1)),
    },
    Kernels {
        dtype: DType::Q8_0,
        dequantize: |s, d| for_each_block(s, d, |b: &BlockQ8_0, y| dequantize_q8(b.d, &b.qs, y)),
        quantize: Some(|s, d| quantize_blocks(s, d, quantize_q8_0)),
    },
    Kernels {
        dtype: DType::Q8_1,
        dequantize: |s, d| for_each_block(s, d, |b: &BlockQ8_1, y| dequantize_q8(b.d, &b.qs, y)),
        quantize: Some(|s, d| quantize_blocks(s, d, quantize_q8_1)),
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn q4_0_maps_the_signed_absmax_to_quant_zero() {
        let mut x = [0.5f32; QK];
        x[3] = -2.0;
        let b = quantize_q4_0(&x);
        // d = -2 / -8 = 0.25, so -2 is quant 0 and 0.5 is 8 + 0.5 / 0.25 = 10.
        assert_eq!(b.d.to_f32(), 0.25);
        assert_eq!(nibble(&b.qs, 3), 0);
        assert_eq!(nibble(&b.qs, 0), 10);
    }

    #[test]
    fn q5_0_high_bits_round_trip() {
        let x: [f32; QK] = std::array::from_fn(|i| i as f32 - 16.0);
        let b = quantize_q5_0(&x);
        let mut y = [0f32; QK];
        dequantize_q5_0(&b, &mut y);
        assert_eq!(x, y);
    }

    #[test]
    fn q8_1_stores_d_times_sum() {
        let x: [f32; QK] = std::array::from_fn(|i| i as f32);
        let b = quantize_q8_1(&x);
        let sum: i32 = b.qs.iter().map(|&q| i32::from(q)).sum();
        assert_eq!(b.s, f16::from_f32(sum as f32 * (31.0 / 127.0)));
    }
}
