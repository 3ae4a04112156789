//! The K-quant tiled path's data preparation ([`super::kquant_tiled`]): weight blocks unpacked
//! to one code byte per value with their scales, mins and bias corrections (the integer form
//! the tile kernels read), and Q8_K activation rows repacked into bands of sixteen.

use super::kquant_tiled::{layout, Q8K_SIZE};
use super::layouts::{scale_min_k4, Band, Unpacked, BAND, QK};
use tessera_tensor::blocks::KVALUES_IQ4NL;
use tessera_tensor::quant::ints::{block_ints, ints_kind, IntsKind};
use tessera_tensor::DType;

impl Unpacked {
    /// Makes room for `nb` blocks of a type with `nsub` scales per block.
    pub(super) fn resize(&mut self, nb: usize, nsub: usize) {
        self.codes.resize(nb * QK, 0);
        self.scales.resize(nb * nsub, 0);
        self.corr.resize(nb * 8, 0);
        self.d.resize(nb, 0.0);
        self.dmin.resize(nb, 0.0);
    }
}

/// f16 bits at `b[i..i + 2]` as f32.
pub(super) fn f16_at(b: &[u8], i: usize) -> f32 {
    half::f16::from_bits(u16::from_le_bytes([b[i], b[i + 1]])).to_f32()
}

/// Two i16 in one i32 (low first).
pub(super) fn pair(lo: i32, hi: i32) -> i32 {
    ((lo as u16 as u32) | ((hi as u16 as u32) << 16)) as i32
}

/// Unpacks block `blk` (its bytes) of type `dtype` into block `b` of `u`.
pub(super) fn unpack_block(dtype: DType, blk: &[u8], u: &mut Unpacked, b: usize) {
    let codes = &mut u.codes[b * QK..(b + 1) * QK];
    match dtype {
        DType::Q4_K | DType::Q5_K => {
            let (scales, qh, qs) = if dtype == DType::Q4_K {
                (&blk[4..16], None, &blk[16..144])
            } else {
                (&blk[4..16], Some(&blk[16..48]), &blk[48..176])
            };
            for j in 0..4 {
                for l in 0..32 {
                    let q = qs[32 * j + l];
                    let (hi0, hi1) = match qh {
                        Some(h) => (((h[l] >> (2 * j)) & 1) << 4, ((h[l] >> (2 * j + 1)) & 1) << 4),
                        None => (0, 0),
                    };
                    codes[64 * j + l] = (q & 0xF) | hi0;
                    codes[64 * j + 32 + l] = (q >> 4) | hi1;
                }
            }
            let scales: &[u8; 12] = scales.try_into().expect("12 scale bytes");
            for s in 0..8 {
                let (sc, m) = scale_min_k4(s, scales);
                u.scales[b * 8 + s] = sc;
                u.corr[b * 8 + s] = pair(m, m);
            }
            (u.d[b], u.dmin[b]) = (f16_at(blk, 0), f16_at(blk, 2));
        }
        DType::Q6_K => {
            let (ql, qh, sc) = (&blk[..128], &blk[128..192], &blk[192..208]);
            for n in 0..2 {
                for l in 0..32 {
                    let (a, c, h) = (ql[64 * n + l], ql[64 * n + 32 + l], qh[32 * n + l]);
                    codes[128 * n + l] = (a & 0xF) | ((h & 3) << 4);
                    codes[128 * n + 32 + l] = (c & 0xF) | (((h >> 2) & 3) << 4);
                    codes[128 * n + 64 + l] = (a >> 4) | (((h >> 4) & 3) << 4);
                    codes[128 * n + 96 + l] = (c >> 4) | (((h >> 6) & 3) << 4);
                }
            }
            for (t, &s) in sc.iter().enumerate() {
                u.scales[b * 16 + t] = i32::from(s as i8);
            }
            for tp in 0..8 {
                let s = |t: usize| -32 * i32::from(sc[t] as i8);
                u.corr[b * 8 + tp] = pair(s(2 * tp), s(2 * tp + 1));
            }
            (u.d[b], u.dmin[b]) = (f16_at(blk, 208), 0.0);
        }
        DType::Q3_K => {
            let (hmask, qs, sc) = (&blk[..32], &blk[32..96], &blk[96..108]);
            for n in 0..2 {
                for j in 0..4 {
                    for l in 0..32 {
                        let low = (qs[32 * n + l] >> (2 * j)) & 3;
                        let high = (hmask[l] >> (4 * n + j)) & 1;
                        codes[128 * n + 32 * j + l] = low | (high << 2);
                    }
                }
            }
            let scale = |j: usize| {
                let low = if j < 8 { sc[j] & 0xF } else { sc[j - 8] >> 4 };
                let high = (sc[8 + j % 4] >> (2 * (j / 4))) & 3;
                i32::from(low | (high << 4)) - 32
            };
            for t in 0..16 {
                u.scales[b * 16 + t] = scale(t);
            }
            for tp in 0..8 {
                u.corr[b * 8 + tp] = pair(-4 * scale(2 * tp), -4 * scale(2 * tp + 1));
            }
            (u.d[b], u.dmin[b]) = (f16_at(blk, 108), 0.0);
        }
        DType::Q2_K => {
            let (sc, qs) = (&blk[..16], &blk[16..80]);
            for n in 0..2 {
                for j in 0..4 {
                    for l in 0..32 {
                        codes[128 * n + 32 * j + l] = (qs[32 * n + l] >> (2 * j)) & 3;
                    }
                }
            }
            for (t, &s) in sc.iter().enumerate() {
                u.scales[b * 16 + t] = i32::from(s & 0xF);
            }
            for tp in 0..8 {
                u.corr[b * 8 + tp] =
                    pair(i32::from(sc[2 * tp] >> 4), i32::from(sc[2 * tp + 1] >> 4));
            }
            (u.d[b], u.dmin[b]) = (f16_at(blk, 80), f16_at(blk, 82));
        }
        DType::IQ4_XS => {
            // d, scales_h (u16), scales_l[4], qs[128]; codes are table values + 128 (bias 128),
            // as ggml's tiled unpacking stores them.
            let (sh, sl, qs) = (u16::from_le_bytes([blk[2], blk[3]]), &blk[4..8], &blk[8..136]);
            for ib in 0..8 {
                for j in 0..16 {
                    let q = qs[16 * ib + j];
                    let code = |nib: u8| (i32::from(KVALUES_IQ4NL[nib as usize]) + 128) as u8;
                    codes[32 * ib + j] = code(q & 0xF);
                    codes[32 * ib + 16 + j] = code(q >> 4);
                }
                let ls = i32::from((sl[ib / 2] >> (4 * (ib % 2))) & 0xF)
                    | (i32::from((sh >> (2 * ib)) & 3) << 4);
                u.scales[b * 8 + ib] = ls - 32;
                u.corr[b * 8 + ib] = pair(-128 * (ls - 32), -128 * (ls - 32));
            }
            (u.d[b], u.dmin[b]) = (f16_at(blk, 0), 0.0);
        }
        DType::IQ2_XXS
        | DType::IQ2_XS
        | DType::IQ2_S
        | DType::IQ3_XXS
        | DType::IQ3_S
        | DType::IQ1_S
        | DType::IQ1_M => {
            // Codes are value + 128 (IQ1: 8·grid + delta + 128, its 1/8 folded into d), the
            // block's constant folded into d, as ggml's tiled unpacking stores them.
            let ints = &mut u.ints;
            block_ints(dtype, blk, ints);
            let (k, mult) = match ints_kind(dtype) {
                Some(IntsKind::Grid { mult }) => (1, mult),
                _ => (8, 0.125),
            };
            if k == 1 {
                // value + 128 as a byte: the sign bit flipped, eight bytes at a time.
                for (c, v) in codes.chunks_exact_mut(8).zip(ints.values.chunks_exact(8)) {
                    let w = u64::from_le_bytes(std::array::from_fn(|i| v[i] as u8));
                    c.copy_from_slice(&(w ^ 0x8080_8080_8080_8080).to_le_bytes());
                }
            } else {
                for (c, (&v, &dl)) in codes.iter_mut().zip(ints.values.iter().zip(&ints.deltas)) {
                    *c = (k * i32::from(v) + i32::from(dl) + 128) as u8;
                }
            }
            let nsub = layout(dtype).expect("covered").nsub;
            for t in 0..nsub {
                u.scales[b * nsub + t] = ints.scales[t * 16 / nsub];
            }
            for tp in 0..8 {
                let s = |t: usize| -128 * ints.scales[t];
                u.corr[b * 8 + tp] = pair(s(2 * tp), s(2 * tp + 1));
            }
            (u.d[b], u.dmin[b]) = (ints.d * mult, 0.0);
        }
        _ => unreachable!("layout() admits only Q2_K..Q6_K, IQ4_XS and the grid i-quants"),
    }
}

/// Repacks Q8_K rows `rows` (at most 16; the rest are zero) of `nb` blocks into a band's
/// three arrays (of [`Band`]'s sizes).
pub(super) fn fill_band(q: &mut [u8], bsums: &mut [i32], d: &mut [f32], nb: usize, rows: &[&[u8]]) {
    q.fill(0);
    bsums.fill(0);
    d.fill(0.0);
    for (c, row) in rows.iter().enumerate() {
        for b in 0..nb {
            let blk = &row[b * Q8K_SIZE..(b + 1) * Q8K_SIZE];
            d[b * BAND + c] = f32::from_le_bytes([blk[0], blk[1], blk[2], blk[3]]);
            let qs = &blk[4..4 + QK];
            for g in 0..QK / 4 {
                let at = ((b * 64 + g) * BAND + c) * 4;
                q[at..at + 4].copy_from_slice(&qs[4 * g..4 * g + 4]);
            }
            let bs = |t: usize| i32::from(i16::from_le_bytes([blk[260 + 2 * t], blk[261 + 2 * t]]));
            for tp in 0..8 {
                bsums[(b * 8 + tp) * BAND + c] = pair(bs(2 * tp), bs(2 * tp + 1));
            }
        }
    }
}

impl Band {
    /// Repacks Q8_K rows `rows` (at most 16; the rest are zero) of `nb` blocks.
    pub(super) fn fill(&mut self, nb: usize, rows: &[&[u8]]) {
        self.q.resize(nb * QK * BAND, 0);
        self.bsums.resize(nb * 8 * BAND, 0);
        self.d.resize(nb * BAND, 0.0);
        fill_band(&mut self.q, &mut self.bsums, &mut self.d, nb, rows);
    }
}
