//! Products with repacked weights: the arithmetic of ggml's CPU_REPACK kernels.
//!
//! On x86 with AVX2, llama.cpp (by default) moves Q4_0, Q4_K and IQ4_NL weights whose row
//! count is a multiple of 8 into its repack buffer at load: eight rows interleaved, multiplied
//! by their own GEMV (one activation row) and GEMM (four at a time) kernels
//! (`ggml_gemv_q4_K_8x8_q8_K` and friends). Those kernels round differently from the `vec_dot`s:
//! each output is one f32 chain over the blocks, not eight lanes summed at the end. Tessera
//! reproduces that arithmetic; the bits do not depend on the memory layout. The weights are
//! stored interleaved too (the loader rearranges them: [`crate::matmul::interleaved`], a layout of
//! Tessera's own in which lane `r` of a register is row `r`). The one-row chains here, in the
//! file's layout, are the reference every kernel is tested against:
//!
//! - Q4_0, IQ4_NL and MXFP4 against Q8_0 activations: per block the exact integer `Σ q·y` (`q`
//!   the signed weight value: nibble − 8, or the IQ4_NL or MXFP4 table value), then
//!   `acc = fma(f32(Σ), dx·f32(dy), acc)`, blocks in order from 0, with `dx` the weight's f16
//!   scale as f32 (MXFP4: half its E8M0 exponent, `ggml_e8m0_to_fp32_half`).
//! - Q4_K against Q8_K: the exact integers `s1 = Σ_sub scale·Σ q·y` and `s2 = Σ_sub min·Σ y`
//!   (from the activation block sums), then `acc = fma(f32(s1), d·dy, acc)` and
//!   `accm = fma(f32(s2), dmin·dy, accm)`, and the output is `acc − accm`. The GEMV takes the
//!   sums over each 256-value block; the GEMM over each 64 values (two sub-blocks), four
//!   times per block. llama.cpp runs the GEMM on the activation rows `0..ne11 − ne11 % 4` of
//!   a product and the GEMV on the rest (and on single rows), so which chain an output gets
//!   depends on its row: the type table names both (`Repack::chains`).
//!
//! For Q4_0, IQ4_NL and MXFP4 the GEMV and GEMM chains are the same. The
//! activations are quantized as for the `vec_dot`s: ggml's 4-row quantizers
//! (`ggml_quantize_mat_q8_0_4x8`, `..._q8_K_4x8`) give the same bytes as `quantize_row_q8_0`
//! and `quantize_row_q8_K` (a Q8_K block whose largest magnitude appears with both signs gets
//! its signs flipped, which leaves every product unchanged).
//!
//! - Q2_K against Q8_K (repacked by llama.cpp only when built with AVX-512): the same pair of
//!   chains with `s1 = Σ_sub scale·Σ q·y` and `s2 = Σ_sub min·Σ y` over its sixteen 16-value
//!   sub-blocks; the GEMV takes them over each 256-value block, the GEMM over each 128 values.
//!
//! Which weights are repacked is llama.cpp's rule
//! ([`interleaved::repacks`](crate::matmul::interleaved::repacks)), decided when the model is
//! loaded.

use super::avx2::{
    dot_u8_i8, fp16, hsum_epi32, iq4_nl_block, iq4_nl_table, ld256, mxfp4_block, mxfp4_table,
    q4_0_block, rd,
};
use crate::matmul::layouts::scale_min_k4;
use crate::matmul::scalar::e8m0_half;
#[cfg(doc)]
use crate::matmul::VecDot;
#[cfg(test)]
use crate::SimdLevel;
use std::arch::x86_64::*;
#[cfg(test)]
use tessera_tensor::DType;

/// The chain of the Q8_0 family for one weight row against one activation row:
/// `unpack(block)` gives the f16 scale and the 32 signed weight values as bytes. One row at a
/// time, in the file's layout (the reference chain; the fast kernels are the eight-row ones).
///
/// # Safety
/// The [`VecDot`] contract, with `xsize` bytes per weight block; AVX2, FMA, F16C.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q8_0_chain(
    n: usize,
    x: *const u8,
    xsize: usize,
    y: *const u8,
    unpack: impl Fn(*const u8) -> (f32, __m256i),
) -> f32 {
    let mut acc = 0f32;
    for i in 0..n / 32 {
        let yb = y.wrapping_add(34 * i);
        // SAFETY: block i of the activation row (f16 d, 32 bytes).
        let (dy, qy) = unsafe { (rd::<u16>(yb), ld256(yb.add(2))) };
        let (dx, qx) = unpack(x.wrapping_add(i * xsize));
        // The sign trick: |x| (unsigned) times y with x's signs; pair sums fit in i16.
        let ax = _mm256_sign_epi8(qx, qx);
        let sum = hsum_epi32(dot_u8_i8(ax, _mm256_sign_epi8(qy, qx)));
        acc = (sum as f32).mul_add(dx * fp16(dy), acc);
    }
    acc
}

/// Repacked Q4_0 · Q8_0.
///
/// # Safety
/// The [`VecDot`] contract; AVX2, FMA, F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::matmul) unsafe fn q4_0_repacked(n: usize, x: *const u8, y: *const u8) -> f32 {
    // SAFETY: `b` is a whole Q4_0 block of the row; forwarded.
    unsafe {
        q8_0_chain(n, x, 18, y, |b| {
            let (d, q) = q4_0_block(b);
            (fp16(d), q)
        })
    }
}

/// Repacked IQ4_NL · Q8_0.
///
/// # Safety
/// The [`VecDot`] contract; AVX2, FMA, F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::matmul) unsafe fn iq4_nl_repacked(n: usize, x: *const u8, y: *const u8) -> f32 {
    let table = iq4_nl_table();
    // SAFETY: `b` is a whole IQ4_NL block of the row; forwarded.
    unsafe {
        q8_0_chain(n, x, 18, y, |b| {
            let (d, q) = iq4_nl_block(table, b);
            (fp16(d), q)
        })
    }
}

/// Repacked MXFP4 · Q8_0.
///
/// # Safety
/// The [`VecDot`] contract; AVX2, FMA, F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::matmul) unsafe fn mxfp4_repacked(n: usize, x: *const u8, y: *const u8) -> f32 {
    let table = mxfp4_table();
    // SAFETY: `b` is a whole MXFP4 block of the row; forwarded.
    unsafe {
        q8_0_chain(n, x, 17, y, |b| {
            let (e, q) = mxfp4_block(table, b);
            (e8m0_half(e), q)
        })
    }
}

/// Bytes of a Q4_K block and of a Q8_K block.
const Q4K: usize = 144;
const Q8K: usize = 292;

/// The scales and mins of the eight sub-blocks of a Q4_K block.
#[inline]
fn scales_mins(q: &[u8; 12]) -> ([i32; 8], [i32; 8]) {
    let (mut sc, mut mn) = ([0; 8], [0; 8]);
    for j in 0..8 {
        (sc[j], mn[j]) = scale_min_k4(j, q);
    }
    (sc, mn)
}

/// Repacked Q4_K · Q8_K: the GEMV chain (one pair of FMAs per block), or with `GEMM` the
/// GEMM chain (one pair per 64 values).
///
/// # Safety
/// The [`VecDot`] contract; AVX2, FMA, F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::matmul) unsafe fn q4_k_repacked<const GEMM: bool>(
    n: usize,
    x: *const u8,
    y: *const u8,
) -> f32 {
    let (mut acc, mut accm) = (0f32, 0f32);
    for b in 0..n / 256 {
        let xb = x.wrapping_add(b * Q4K);
        let yb = y.wrapping_add(b * Q8K);
        // SAFETY: whole Q4_K (d, dmin, scales[12], qs[128]) and Q8_K (d, qs[256], bsums[16])
        // blocks.
        let (d, dmin, packed, dy) = unsafe {
            (rd::<u16>(xb), rd::<u16>(xb.add(2)), rd::<[u8; 12]>(xb.add(4)), rd::<f32>(yb))
        };
        let (sc, mn) = scales_mins(&packed);
        let (dd, dm) = (fp16(d) * dy, fp16(dmin) * dy);
        let mut s1 = _mm256_setzero_si256();
        let mut s2 = 0i32;
        for j in 0..4 {
            // SAFETY: 32 code bytes of the block and 64 activation bytes of it.
            let (q, y0, y1) = unsafe {
                (ld256(xb.add(16 + 32 * j)), ld256(yb.add(4 + 64 * j)), ld256(yb.add(36 + 64 * j)))
            };
            let lo = _mm256_and_si256(q, _mm256_set1_epi8(0x0F));
            let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(q), _mm256_set1_epi8(0x0F));
            // maddubs pair sums (at most 2·15·128) times the scale, summed in pairs by one
            // madd: exact, as ggml's kernels compute them.
            let scale = |v: i32| _mm256_set1_epi16(v as i16);
            let p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, y0), scale(sc[2 * j]));
            let p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, y1), scale(sc[2 * j + 1]));
            s1 = _mm256_add_epi32(s1, _mm256_add_epi32(p0, p1));
            if GEMM {
                for sub in [2 * j, 2 * j + 1] {
                    // SAFETY: the two 16-value sums of sub-block `sub` in the block sums.
                    let (a, c) = unsafe {
                        (rd::<i16>(yb.add(260 + 4 * sub)), rd::<i16>(yb.add(262 + 4 * sub)))
                    };
                    s2 += mn[sub] * (i32::from(a) + i32::from(c));
                }
                acc = (hsum_epi32(s1) as f32).mul_add(dd, acc);
                accm = (s2 as f32).mul_add(dm, accm);
                (s1, s2) = (_mm256_setzero_si256(), 0);
            }
        }
        if !GEMM {
            // Σ_sub min·(its two 16-value sums), as ggml's GEMV: pair sums by one hadd, one
            // madd with the mins (exact in i16/i32).
            // SAFETY: the 16 block sums (32 bytes at 260).
            let bs = unsafe { ld256(yb.add(260)) };
            let pairs =
                _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256::<1>(bs));
            let m = |i: usize| mn[i] as i16;
            let mins = _mm_setr_epi16(m(0), m(1), m(2), m(3), m(4), m(5), m(6), m(7));
            let p = _mm_madd_epi16(pairs, mins);
            let p = _mm_add_epi32(p, _mm_unpackhi_epi64(p, p));
            s2 = _mm_cvtsi128_si32(_mm_add_epi32(p, _mm_shuffle_epi32::<0b01>(p)));
            acc = (hsum_epi32(s1) as f32).mul_add(dd, acc);
            accm = (s2 as f32).mul_add(dm, accm);
        }
    }
    acc - accm
}

/// Bytes of a Q2_K block.
const Q2K: usize = 84;

/// Repacked Q2_K · Q8_K: the GEMV chain (one pair of FMAs per block), or with `GEMM` the
/// GEMM chain (one pair per 128 values). Integer code: a reference, not a fast path.
///
/// # Safety
/// The [`VecDot`] contract; AVX2, FMA, F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::matmul) unsafe fn q2_k_repacked<const GEMM: bool>(
    n: usize,
    x: *const u8,
    y: *const u8,
) -> f32 {
    let (mut acc, mut accm) = (0f32, 0f32);
    for b in 0..n / 256 {
        let xb = x.wrapping_add(b * Q2K);
        let yb = y.wrapping_add(b * Q8K);
        // SAFETY: whole Q2_K (scales[16], qs[64], d, dmin) and Q8_K (d, qs[256], bsums[16])
        // blocks.
        let (scales, qs, d, dmin, dy, ys, bsums) = unsafe {
            (
                rd::<[u8; 16]>(xb),
                rd::<[u8; 64]>(xb.add(16)),
                rd::<u16>(xb.add(80)),
                rd::<u16>(xb.add(82)),
                rd::<f32>(yb),
                rd::<[i8; 256]>(yb.add(4)),
                rd::<[i16; 16]>(yb.add(260)),
            )
        };
        let (dd, dm) = (fp16(d) * dy, fp16(dmin) * dy);
        let (mut s1, mut s2) = (0i32, 0i32);
        for half in 0..2 {
            // Code byte l of the half holds values 128·half + 32k + l in bits 2k, 2k + 1.
            let mut sums = [0i32; 8];
            for (l, &byte) in qs[32 * half..32 * half + 32].iter().enumerate() {
                for k in 0..4 {
                    let q = i32::from((byte >> (2 * k)) & 3);
                    sums[2 * k + l / 16] += q * i32::from(ys[128 * half + 32 * k + l]);
                }
            }
            for (i, sum) in sums.iter().enumerate() {
                let sub = 8 * half + i;
                s1 += i32::from(scales[sub] & 0xF) * sum;
                s2 += i32::from(scales[sub] >> 4) * i32::from(bsums[sub]);
            }
            if GEMM || half == 1 {
                acc = (s1 as f32).mul_add(dd, acc);
                accm = (s2 as f32).mul_add(dm, accm);
                (s1, s2) = (0, 0);
            }
        }
    }
    acc - accm
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matmul::tests::Rng;
    use tessera_tensor::quant;

    /// ggml's repacked chains written out in scalar code from the dequantizer's integers.
    fn reference(dtype: DType, n: usize, x: &[u8], y: &[u8], gemm: bool) -> f32 {
        let f16 = |b: &[u8]| half::f16::from_le_bytes([b[0], b[1]]).to_f32();
        match dtype {
            DType::Q4_0 | DType::IQ4_NL | DType::MXFP4 => {
                // MXFP4: a 1-byte exponent where the others have an f16 scale.
                let (bs, head) = if dtype == DType::MXFP4 { (17, 1) } else { (18, 2) };
                let mut acc = 0f32;
                for i in 0..n / 32 {
                    let (xb, yb) = (&x[bs * i..bs * (i + 1)], &y[34 * i..34 * i + 34]);
                    let val = |k: usize| {
                        let qs = &xb[head..];
                        let nib = if k < 16 { qs[k] & 0xF } else { qs[k - 16] >> 4 };
                        match dtype {
                            DType::Q4_0 => i32::from(nib) - 8,
                            DType::IQ4_NL => {
                                i32::from(tessera_tensor::blocks::KVALUES_IQ4NL[nib as usize])
                            }
                            _ => i32::from(tessera_tensor::blocks::KVALUES_MXFP4[nib as usize]),
                        }
                    };
                    let sum: i32 = (0..32).map(|k| val(k) * i32::from(yb[2 + k] as i8)).sum();
                    let dx = if dtype == DType::MXFP4 { e8m0_half(xb[0]) } else { f16(&xb[..2]) };
                    acc = (sum as f32).mul_add(dx * f16(&yb[..2]), acc);
                }
                acc
            }
            DType::Q4_K => {
                let (mut acc, mut accm) = (0f32, 0f32);
                for b in 0..n / 256 {
                    let (xb, yb) = (&x[Q4K * b..Q4K * (b + 1)], &y[Q8K * b..Q8K * (b + 1)]);
                    let (sc, mn) = scales_mins(xb[4..16].try_into().unwrap());
                    let dy = f32::from_le_bytes(yb[..4].try_into().unwrap());
                    let mut s1 = 0i32;
                    let mut s2 = 0i32;
                    for sub in 0..8 {
                        let (j, high) = (sub / 2, sub % 2 == 1);
                        let mut raw = 0i32;
                        let mut ysum = 0i32;
                        for l in 0..32 {
                            let q = xb[16 + 32 * j + l];
                            let code = if high { q >> 4 } else { q & 0xF };
                            let v = i32::from(yb[4 + 32 * sub + l] as i8);
                            raw += i32::from(code) * v;
                            ysum += v;
                        }
                        s1 += sc[sub] * raw;
                        s2 += mn[sub] * ysum;
                        if (gemm && sub % 2 == 1) || sub == 7 {
                            acc = (s1 as f32).mul_add(f16(&xb[..2]) * dy, acc);
                            accm = (s2 as f32).mul_add(f16(&xb[2..4]) * dy, accm);
                            (s1, s2) = (0, 0);
                        }
                    }
                }
                acc - accm
            }
            DType::Q2_K => {
                let (mut acc, mut accm) = (0f32, 0f32);
                for b in 0..n / 256 {
                    let (xb, yb) = (&x[84 * b..84 * (b + 1)], &y[Q8K * b..Q8K * (b + 1)]);
                    let dy = f32::from_le_bytes(yb[..4].try_into().unwrap());
                    let (mut s1, mut s2) = (0i32, 0i32);
                    for sub in 0..16 {
                        let (mut raw, mut ysum) = (0i32, 0i32);
                        for v in 16 * sub..16 * sub + 16 {
                            // Value v: byte 32·(v / 128) + v % 32 of the codes, bits 2·(v % 128 / 32).
                            let byte = xb[16 + 32 * (v / 128) + v % 32];
                            let q = (byte >> (2 * (v % 128 / 32))) & 3;
                            let yv = i32::from(yb[4 + v] as i8);
                            raw += i32::from(q) * yv;
                            ysum += yv;
                        }
                        s1 += i32::from(xb[sub] & 0xF) * raw;
                        s2 += i32::from(xb[sub] >> 4) * ysum;
                        if (gemm && sub == 7) || sub == 15 {
                            acc = (s1 as f32).mul_add(f16(&xb[80..82]) * dy, acc);
                            accm = (s2 as f32).mul_add(f16(&xb[82..84]) * dy, accm);
                            (s1, s2) = (0, 0);
                        }
                    }
                }
                acc - accm
            }
            _ => unreachable!(),
        }
    }

    #[test]
    fn kernels_match_the_scalar_repacked_chains() {
        if SimdLevel::detect() < SimdLevel::Avx2 {
            eprintln!("skipped: no AVX2");
            return;
        }
        let mut rng = Rng(99);
        for dtype in [DType::Q4_0, DType::IQ4_NL, DType::MXFP4, DType::Q4_K, DType::Q2_K] {
            let k = dtype.block_size() * 6;
            for _ in 0..20 {
                let x = quant::quantize(dtype, &rng.f32s(k)).unwrap();
                let vdt = if dtype.block_size() == 256 { DType::Q8_K } else { DType::Q8_0 };
                let y = quant::quantize(vdt, &rng.f32s(k)).unwrap();
                let (gemv, gemm) =
                    crate::matmul::types::row(dtype).unwrap().x86.repack.unwrap().chains;
                for (f, is_gemm) in [(gemv, false), (gemm, true)] {
                    // SAFETY: one row of k values of each type; AVX2 checked above.
                    let got = unsafe { f(k, x.as_ptr(), y.as_ptr()) };
                    let want = reference(dtype, k, &x, &y, is_gemm);
                    assert_eq!(got.to_bits(), want.to_bits(), "{dtype} gemm={is_gemm}");
                }
            }
        }
    }
}
