//! The K-quants with 16 sub-blocks of 16: Q2_K, Q3_K and Q6_K.
//!
//! All three store their low bits in the same interleaved order: within each half of 128
//! elements, byte `l` (0..32) of a 32-byte run holds elements `l`, `l + 32`, `l + 64` and
//! `l + 96`, and element `e`'s sub-block (and so its scale) is `e / 16`.

use super::search::{make_q3_quants, make_qkx2_quants, make_qx_quants, nearest_int, Qkx2Search};
use super::{GROUP_MAX_EPS, QK_K, SUB16};
use crate::blocks::{BlockQ2K, BlockQ3K, BlockQ6K};
use half::f16;

/// Where element `e` (0..256) of a Q2_K/Q3_K block lives in `qs`: byte index and bit shift of
/// its 2-bit field.
fn two_bit_slot(e: usize) -> (usize, u32) {
    (32 * (e / 128) + e % 32, 2 * ((e % 128) / 32) as u32)
}

/// Packs 2-bit values (`levels[e] < 4`) into the Q2_K/Q3_K `qs` layout.
fn pack_two_bits(levels: &[u8; QK_K]) -> [u8; 64] {
    let mut qs = [0u8; 64];
    for (e, &l) in levels.iter().enumerate() {
        let (byte, shift) = two_bit_slot(e);
        qs[byte] |= l << shift;
    }
    qs
}

/// The 2-bit field of element `e`.
fn two_bits(qs: &[u8; 64], e: usize) -> u8 {
    let (byte, shift) = two_bit_slot(e);
    (qs[byte] >> shift) & 3
}

// ---------------------------------------------------------------------------------------------
// Q2_K: x = d·(scales[s] & 15)·q - dmin·(scales[s] >> 4), q in 0..4.

/// `quantize_row_q2_K_ref` for one block.
pub(super) fn quantize_q2_k(x: &[f32; QK_K]) -> BlockQ2K {
    const Q4SCALE: f32 = 15.0;
    let search = Qkx2Search { rmin: -0.5, rdelta: 0.1, nstep: 15, use_mad: true };

    let mut levels = [0u8; QK_K];
    let (mut scales, mut mins) = ([0f32; SUB16], [0f32; SUB16]);
    let (mut max_scale, mut max_min) = (0f32, 0f32);
    for (j, (xs, ls)) in x.chunks_exact(16).zip(levels.chunks_exact_mut(16)).enumerate() {
        let weights: [f32; 16] = std::array::from_fn(|l| xs[l].abs());
        (scales[j], mins[j]) = make_qkx2_quants(3, xs, &weights, ls, &search);
        if scales[j] > max_scale {
            max_scale = scales[j];
        }
        if mins[j] > max_min {
            max_min = mins[j];
        }
    }

    // 4-bit sub-block scales (low nibble) and mins (high nibble); C stores the ints into
    // uint8_t, so out-of-range values wrap exactly as `as u8` does.
    let mut packed = [0u8; SUB16];
    let mut d = f16::ZERO;
    if max_scale > 0.0 {
        let iscale = Q4SCALE / max_scale;
        for (p, &s) in packed.iter_mut().zip(&scales) {
            *p = nearest_int(iscale * s) as u8;
        }
        d = f16::from_f32(max_scale / Q4SCALE);
    }
    let mut dmin = f16::ZERO;
    if max_min > 0.0 {
        let iscale = Q4SCALE / max_min;
        for (p, &m) in packed.iter_mut().zip(&mins) {
            *p |= (nearest_int(iscale * m) << 4) as u8;
        }
        dmin = f16::from_f32(max_min / Q4SCALE);
    }

    // Re-quantize against the scales as stored; sub-blocks with a zero scale keep the quants
    // of the search.
    for (j, (xs, ls)) in x.chunks_exact(16).zip(levels.chunks_exact_mut(16)).enumerate() {
        let dl = d.to_f32() * f32::from(packed[j] & 0xF);
        if dl == 0.0 {
            continue;
        }
        let ml = dmin.to_f32() * f32::from(packed[j] >> 4);
        for (l, &xi) in ls.iter_mut().zip(xs) {
            *l = nearest_int((xi + ml) / dl).clamp(0, 3) as u8;
        }
    }

    BlockQ2K { scales: packed, qs: pack_two_bits(&levels), d, dmin }
}

/// `dequantize_row_q2_K` for one block.
pub(super) fn dequantize_q2_k(b: &BlockQ2K, y: &mut [f32; QK_K]) {
    let (d, min) = (b.d.to_f32(), b.dmin.to_f32());
    for (e, y) in y.iter_mut().enumerate() {
        let sc = b.scales[e / 16];
        let dl = d * f32::from(sc & 0xF);
        let ml = min * f32::from(sc >> 4);
        *y = dl * f32::from(two_bits(&b.qs, e)) - ml;
    }
}

// ---------------------------------------------------------------------------------------------
// Q3_K: x = d·(s - 32)·(q - 4), q in 0..8 (low 2 bits in qs, high bit in hmask), s 6 bits.

/// Sub-block scale `j` of a Q3_K block, minus 32: the low 4 bits are nibbles of bytes 0..8
/// (low nibbles for `j < 8`), the high 2 bits come from bytes 8..12.
fn q3_k_scale(scales: &[u8; 12], j: usize) -> i32 {
    let low = if j < 8 { scales[j] & 0xF } else { scales[j - 8] >> 4 };
    let high = (scales[8 + j % 4] >> (2 * (j / 4))) & 3;
    i32::from(low | (high << 4)) - 32
}

/// Packs 16 unsigned 6-bit scales into the 12 bytes [`q3_k_scale`] reads.
fn pack_q3_k_scales(ls: &[u8; SUB16]) -> [u8; 12] {
    let mut scales = [0u8; 12];
    for (j, &l) in ls.iter().enumerate() {
        if j < 8 {
            scales[j] = l & 0xF;
        } else {
            scales[j - 8] |= (l & 0xF) << 4;
        }
        scales[8 + j % 4] |= (l >> 4) << (2 * (j / 4));
    }
    scales
}

/// Where the high bit of element `e` lives: `hmask[e % 32]`, bit `e / 32`.
fn hmask_slot(e: usize) -> (usize, u32) {
    (e % 32, (e / 32) as u32)
}

/// `quantize_row_q3_K_ref` for one block.
pub(super) fn quantize_q3_k(x: &[f32; QK_K]) -> BlockQ3K {
    let mut levels = [0u8; QK_K];
    let mut scales = [0f32; SUB16];
    // The scale of largest magnitude, with its sign.
    let (mut max_scale, mut amax) = (0f32, 0f32);
    for (j, (xs, ls)) in x.chunks_exact(16).zip(levels.chunks_exact_mut(16)).enumerate() {
        scales[j] = make_q3_quants(4, xs, ls);
        if scales[j].abs() > amax {
            amax = scales[j].abs();
            max_scale = scales[j];
        }
    }

    let (packed, d) = if max_scale != 0.0 {
        let iscale = -32.0 / max_scale;
        // C: `int8_t l = nearest_int(...)` truncates to 8 bits before clamping.
        let ls: [u8; SUB16] = std::array::from_fn(|j| {
            ((nearest_int(iscale * scales[j]) as i8).clamp(-32, 31) + 32) as u8
        });
        (pack_q3_k_scales(&ls), f16::from_f32(1.0 / iscale))
    } else {
        ([0u8; 12], f16::ZERO)
    };

    for (j, (xs, ls)) in x.chunks_exact(16).zip(levels.chunks_exact_mut(16)).enumerate() {
        let dl = d.to_f32() * q3_k_scale(&packed, j) as f32;
        if dl == 0.0 {
            continue;
        }
        for (l, &xi) in ls.iter_mut().zip(xs) {
            *l = (nearest_int(xi / dl).clamp(-4, 3) + 4) as u8;
        }
    }

    let mut hmask = [0u8; 32];
    for (e, l) in levels.iter_mut().enumerate() {
        if *l > 3 {
            let (byte, bit) = hmask_slot(e);
            hmask[byte] |= 1 << bit;
            *l -= 4;
        }
    }
    BlockQ3K { hmask, qs: pack_two_bits(&levels), scales: packed, d }
}

/// `dequantize_row_q3_K` for one block.
pub(super) fn dequantize_q3_k(b: &BlockQ3K, y: &mut [f32; QK_K]) {
    let d = b.d.to_f32();
    for (e, y) in y.iter_mut().enumerate() {
        let dl = d * q3_k_scale(&b.scales, e / 16) as f32;
        let (byte, bit) = hmask_slot(e);
        let high_cleared = (b.hmask[byte] >> bit) & 1 == 0;
        let q = i32::from(two_bits(&b.qs, e)) - if high_cleared { 4 } else { 0 };
        *y = dl * q as f32;
    }
}

// ---------------------------------------------------------------------------------------------
// Q6_K: x = d·scales[s]·(q - 32), q in 0..64 (low 4 bits in ql, high 2 bits in qh).

/// Where element `e` lives in a Q6_K block: (`ql` byte, nibble shift, `qh` byte, shift).
fn q6_k_slot(e: usize) -> (usize, u32, usize, u32) {
    let (half, r) = (e / 128, e % 128);
    let (quarter, l) = (r / 32, r % 32);
    let ql = 64 * half + l + 32 * (quarter & 1);
    let ql_shift = 4 * (quarter / 2) as u32;
    (ql, ql_shift, 32 * half + l, 2 * quarter as u32)
}

/// `quantize_row_q6_K_ref` for one block.
pub(super) fn quantize_q6_k(x: &[f32; QK_K]) -> BlockQ6K {
    let mut levels = [0u8; QK_K];
    let mut scales = [0f32; SUB16];
    let (mut max_scale, mut max_abs_scale) = (0f32, 0f32);
    for (j, (xs, ls)) in x.chunks_exact(16).zip(levels.chunks_exact_mut(16)).enumerate() {
        scales[j] = make_qx_quants(32, xs, ls);
        if scales[j].abs() > max_abs_scale {
            max_abs_scale = scales[j].abs();
            max_scale = scales[j];
        }
    }
    if max_abs_scale < GROUP_MAX_EPS {
        return BlockQ6K { ql: [0; 128], qh: [0; 64], scales: [0; 16], d: f16::ZERO };
    }

    let iscale = -128.0 / max_scale;
    let d = f16::from_f32(1.0 / iscale);
    let sc: [i8; SUB16] = std::array::from_fn(|j| nearest_int(iscale * scales[j]).min(127) as i8);

    for (j, (xs, ls)) in x.chunks_exact(16).zip(levels.chunks_exact_mut(16)).enumerate() {
        let dl = d.to_f32() * f32::from(sc[j]);
        if dl == 0.0 {
            continue;
        }
        for (l, &xi) in ls.iter_mut().zip(xs) {
            *l = (nearest_int(xi / dl).clamp(-32, 31) + 32) as u8;
        }
    }

    let (mut ql, mut qh) = ([0u8; 128], [0u8; 64]);
    for (e, &l) in levels.iter().enumerate() {
        let (lo, lo_shift, hi, hi_shift) = q6_k_slot(e);
        ql[lo] |= (l & 0xF) << lo_shift;
        qh[hi] |= (l >> 4) << hi_shift;
    }
    BlockQ6K { ql, qh, scales: sc, d }
}

/// `dequantize_row_q6_K` for one block.
pub(super) fn dequantize_q6_k(b: &BlockQ6K, y: &mut [f32; QK_K]) {
    let d = b.d.to_f32();
    for (e, y) in y.iter_mut().enumerate() {
        let (lo, lo_shift, hi, hi_shift) = q6_k_slot(e);
        let q = ((b.ql[lo] >> lo_shift) & 0xF) | (((b.qh[hi] >> hi_shift) & 3) << 4);
        *y = d * f32::from(b.scales[e / 16]) * (i32::from(q) - 32) as f32;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn q3_k_scale_packing_round_trips() {
        let ls: [u8; SUB16] = std::array::from_fn(|j| ((j * 17 + 5) % 64) as u8);
        let packed = pack_q3_k_scales(&ls);
        for (j, &l) in ls.iter().enumerate() {
            assert_eq!(q3_k_scale(&packed, j), i32::from(l) - 32);
        }
    }

    #[test]
    fn slots_cover_every_bit_once() {
        let mut two = [0u8; 64];
        let mut hm = [0u8; 32];
        let (mut ql, mut qh) = ([0u8; 128], [0u8; 64]);
        for e in 0..QK_K {
            let (b, s) = two_bit_slot(e);
            assert_eq!(two[b] & (3 << s), 0);
            two[b] |= 3 << s;
            let (b, s) = hmask_slot(e);
            assert_eq!(hm[b] & (1 << s), 0);
            hm[b] |= 1 << s;
            let (lo, los, hi, his) = q6_k_slot(e);
            assert_eq!((ql[lo] & (0xF << los), qh[hi] & (3 << his)), (0, 0));
            ql[lo] |= 0xF << los;
            qh[hi] |= 3 << his;
        }
        assert!(two.iter().chain(&hm).chain(&ql).chain(&qh).all(|&b| b == 0xFF));
    }
}
