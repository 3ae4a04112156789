//! The K-quants with 8 sub-blocks of 32 and 6-bit scales and mins: Q4_K and Q5_K.
//!
//! `x = d·sc[s]·q - dmin·m[s]` with `s = e / 32`. The 8 scales and 8 mins are packed into 12
//! bytes (`get_scale_min_k4`): bytes 0..4 hold the low 6 bits of scales 0..4, bytes 4..8 those
//! of mins 0..4, bytes 8..12 the low 4 bits of scale (low nibble) and min (high nibble) 4..8,
//! whose high 2 bits sit in the top 2 bits of bytes 0..8.
//!
//! The low 4 bits of element `e` are in `qs[32·(e/64) + e%32]`, low nibble when `e%64 < 32`;
//! Q5_K's fifth bit is bit `e/32` of `qh[e%32]`.

use super::search::{make_qkx2_quants, nearest_int, Qkx2Search};
use super::{QK_K, SUB32};
use crate::blocks::{BlockQ4K, BlockQ5K, K_SCALE_SIZE};
use half::f16;

/// Scale and min of sub-block `j` (`get_scale_min_k4`).
pub(super) fn scale_min_k4(j: usize, q: &[u8; K_SCALE_SIZE]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        ((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4), (q[j + 4] >> 4) | ((q[j] >> 6) << 4))
    }
}

/// Packs 8 scales and 8 mins (each `< 64`) as [`scale_min_k4`] reads them.
fn pack_scale_min_k4(ls: &[u8; SUB32], lm: &[u8; SUB32]) -> [u8; K_SCALE_SIZE] {
    let mut q = [0u8; K_SCALE_SIZE];
    for j in 0..SUB32 {
        if j < 4 {
            q[j] = ls[j];
            q[j + 4] = lm[j];
        } else {
            q[j + 4] = (ls[j] & 0xF) | ((lm[j] & 0xF) << 4);
            q[j - 4] |= (ls[j] >> 4) << 6;
            q[j] |= (lm[j] >> 4) << 6;
        }
    }
    q
}

/// `qs` byte and nibble shift of element `e`.
fn nibble_slot(e: usize) -> (usize, u32) {
    (32 * (e / 64) + e % 32, 4 * ((e % 64) / 32) as u32)
}

/// The shared part of `quantize_row_q4_K_ref` and `quantize_row_q5_K_ref` for one block.
struct ScaleMinBlock {
    /// The quants, one per element.
    levels: [u8; QK_K],
    /// Packed 6-bit scales and mins.
    scales: [u8; K_SCALE_SIZE],
    /// Super-block scale of the scales.
    d: f16,
    /// Super-block scale of the mins.
    dmin: f16,
}

/// Searches the sub-block scales and mins (quants `0..=nmax`), quantizes them to 6 bits and
/// re-quantizes the values against them.
fn quantize_scale_min(x: &[f32; QK_K], nmax: i32, search: &Qkx2Search) -> ScaleMinBlock {
    let mut levels = [0u8; QK_K];
    let (mut scales, mut mins) = ([0f32; SUB32], [0f32; SUB32]);
    let (mut max_scale, mut max_min) = (0f32, 0f32);
    for (j, (xs, ls)) in x.chunks_exact(32).zip(levels.chunks_exact_mut(32)).enumerate() {
        // Weights: the sub-block's RMS plus each element's magnitude.
        let sum_x2 = xs.iter().fold(0f32, |s, &v| s + v * v);
        let av_x = (sum_x2 / 32.0).sqrt();
        let weights: [f32; 32] = std::array::from_fn(|l| av_x + xs[l].abs());
        (scales[j], mins[j]) = make_qkx2_quants(nmax, xs, &weights, ls, search);
        if scales[j] > max_scale {
            max_scale = scales[j];
        }
        if mins[j] > max_min {
            max_min = mins[j];
        }
    }

    let inv_scale = if max_scale > 0.0 { 63.0 / max_scale } else { 0.0 };
    let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
    // C stores nearest_int's result into uint8_t (wrapping) before `MIN(63, ·)`.
    let ls: [u8; SUB32] =
        std::array::from_fn(|j| (nearest_int(inv_scale * scales[j]) as u8).min(63));
    let lm: [u8; SUB32] = std::array::from_fn(|j| (nearest_int(inv_min * mins[j]) as u8).min(63));
    let packed = pack_scale_min_k4(&ls, &lm);
    let d = f16::from_f32(max_scale / 63.0);
    let dmin = f16::from_f32(max_min / 63.0);

    // Re-quantize against the stored scales; sub-blocks with a zero scale keep the search's
    // quants.
    for (j, (xs, ls)) in x.chunks_exact(32).zip(levels.chunks_exact_mut(32)).enumerate() {
        let (sc, m) = scale_min_k4(j, &packed);
        let dl = d.to_f32() * f32::from(sc);
        if dl == 0.0 {
            continue;
        }
        let dm = dmin.to_f32() * f32::from(m);
        for (l, &xi) in ls.iter_mut().zip(xs) {
            *l = nearest_int((xi + dm) / dl).clamp(0, nmax) as u8;
        }
    }
    ScaleMinBlock { levels, scales: packed, d, dmin }
}

/// `quantize_row_q4_K_ref` for one block.
pub(super) fn quantize_q4_k(x: &[f32; QK_K]) -> BlockQ4K {
    let search = Qkx2Search { rmin: -1.0, rdelta: 0.1, nstep: 20, use_mad: false };
    let b = quantize_scale_min(x, 15, &search);
    let mut qs = [0u8; 128];
    for (e, &l) in b.levels.iter().enumerate() {
        let (byte, shift) = nibble_slot(e);
        qs[byte] |= l << shift;
    }
    BlockQ4K { d: b.d, dmin: b.dmin, scales: b.scales, qs }
}

/// `quantize_row_q5_K_ref` for one block.
pub(super) fn quantize_q5_k(x: &[f32; QK_K]) -> BlockQ5K {
    let search = Qkx2Search { rmin: -0.5, rdelta: 0.1, nstep: 15, use_mad: false };
    let b = quantize_scale_min(x, 31, &search);
    let (mut qs, mut qh) = ([0u8; 128], [0u8; 32]);
    for (e, &l) in b.levels.iter().enumerate() {
        let (byte, shift) = nibble_slot(e);
        qs[byte] |= (l & 0xF) << shift;
        qh[e % 32] |= (l >> 4) << (e / 32);
    }
    BlockQ5K { d: b.d, dmin: b.dmin, scales: b.scales, qh, qs }
}

/// `d·sc·q - dmin·m` for element `e` with 4 (or 5) bit quant `q`.
fn scale_min_value(d: f32, dmin: f32, scales: &[u8; K_SCALE_SIZE], e: usize, q: u8) -> f32 {
    let (sc, m) = scale_min_k4(e / 32, scales);
    let (d1, m1) = (d * f32::from(sc), dmin * f32::from(m));
    d1 * f32::from(q) - m1
}

/// `dequantize_row_q4_K` for one block.
pub(super) fn dequantize_q4_k(b: &BlockQ4K, y: &mut [f32; QK_K]) {
    let (d, dmin) = (b.d.to_f32(), b.dmin.to_f32());
    for (e, y) in y.iter_mut().enumerate() {
        let (byte, shift) = nibble_slot(e);
        *y = scale_min_value(d, dmin, &b.scales, e, (b.qs[byte] >> shift) & 0xF);
    }
}

/// `dequantize_row_q5_K` for one block.
pub(super) fn dequantize_q5_k(b: &BlockQ5K, y: &mut [f32; QK_K]) {
    let (d, dmin) = (b.d.to_f32(), b.dmin.to_f32());
    for (e, y) in y.iter_mut().enumerate() {
        let (byte, shift) = nibble_slot(e);
        let q = ((b.qs[byte] >> shift) & 0xF) | (((b.qh[e % 32] >> (e / 32)) & 1) << 4);
        *y = scale_min_value(d, dmin, &b.scales, e, q);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scale_min_packing_round_trips() {
        let ls: [u8; SUB32] = std::array::from_fn(|j| ((j * 23 + 7) % 64) as u8);
        let lm: [u8; SUB32] = std::array::from_fn(|j| ((j * 41 + 60) % 64) as u8);
        let q = pack_scale_min_k4(&ls, &lm);
        for j in 0..SUB32 {
            assert_eq!(scale_min_k4(j, &q), (ls[j], lm[j]));
        }
    }
}
