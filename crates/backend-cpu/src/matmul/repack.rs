//! Products with repacked weights: the arithmetic of ggml's CPU_REPACK kernels.
//!
//! On x86 with AVX2, llama.cpp (by default) moves Q4_0, Q4_K and IQ4_NL weights whose row
//! count is a multiple of 8 into its repack buffer at load: eight rows interleaved, multiplied
//! by their own GEMV (one activation row) and GEMM (four at a time) kernels
//! (`ggml_gemv_q4_K_8x8_q8_K` and friends). Those kernels round differently from the `vec_dot`s:
//! each output is one f32 chain over the blocks, not eight lanes summed at the end. Tessera
//! reproduces the arithmetic, not the memory layout (its kernels read the original blocks):
//!
//! - Q4_0 and IQ4_NL against Q8_0 activations: per block the exact integer `Σ q·y` (`q` the
//!   signed weight value: nibble − 8, or the IQ4_NL table value), then
//!   `acc = fma(f32(Σ), f32(dx)·f32(dy), acc)`, blocks in order from 0.
//! - Q4_K against Q8_K: the exact integers `s1 = Σ_sub scale·Σ q·y` and `s2 = Σ_sub min·Σ y`
//!   (from the activation block sums), then `acc = fma(f32(s1), d·dy, acc)` and
//!   `accm = fma(f32(s2), dmin·dy, accm)`, and the output is `acc − accm`. The GEMV takes the
//!   sums over each 256-value block; the GEMM over each 64 values (two sub-blocks), four
//!   times per block. llama.cpp runs the GEMM on the activation rows `0..ne11 − ne11 % 4` of
//!   a product and the GEMV on the rest (and on single rows), so which chain an output gets
//!   depends on its row: [`dots`] gives both.
//!
//! For Q4_0 and IQ4_NL the GEMV and GEMM chains are the same. The
//! activations are quantized as for the `vec_dot`s: ggml's 4-row quantizers
//! (`ggml_quantize_mat_q8_0_4x8`, `..._q8_K_4x8`) give the same bytes as `quantize_row_q8_0`
//! and `quantize_row_q8_K` (a Q8_K block whose largest magnitude appears with both signs gets
//! its signs flipped, which leaves every product unchanged).
//!
//! Which weights are repacked is llama.cpp's rule ([`applies`]), decided when the model is
//! loaded; Q2_K (repacked by llama.cpp on AVX-512) and MXFP4 are not reproduced yet.

use super::avx2::{dot_u8_i8, fp16_mul, hsum_epi32, ld128, ld256, nibbles, rd};
use super::VecDot;
use crate::SimdLevel;
use std::arch::x86_64::*;
use tessera_tensor::DType;

/// Whether llama.cpp (built for `level`) would repack a 2-D weight of type `dtype` with `rows`
/// rows (`ggml_repack_get_optimal_repack_type` on x86): Q4_0, Q4_K and IQ4_NL with AVX2 and a
/// row count divisible by 8. (Q2_K with AVX-512 and MXFP4 are llama.cpp's too; not yet here.)
pub(crate) fn applies(dtype: DType, rows: usize, level: SimdLevel) -> bool {
    level >= SimdLevel::Avx2
        && rows % 8 == 0
        && matches!(dtype, DType::Q4_0 | DType::Q4_K | DType::IQ4_NL)
}

/// The repacked kernels of `dtype` (one weight row against one activation row of its dot
/// type): the GEMV chain and the GEMM chain. The CPU must have AVX2, FMA and F16C to call them.
pub(super) fn dots(dtype: DType) -> Option<(VecDot, VecDot)> {
    Some(match dtype {
        DType::Q4_0 => (q4_0_repacked, q4_0_repacked),
        DType::IQ4_NL => (iq4_nl_repacked, iq4_nl_repacked),
        DType::Q4_K => (q4_k_repacked::<false>, q4_k_repacked::<true>),
        _ => return None,
    })
}

/// Repacked Q4_0 · Q8_0, one row.
///
/// # Safety
/// The [`VecDot`] contract; AVX2, FMA, F16C.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4_0_repacked(n: usize, x: *const u8, y: *const u8) -> f32 {
    // SAFETY: forwarded.
    unsafe { q4_0_rows::<1>(n, x, 0, y)[0] }
}

/// Repacked IQ4_NL · Q8_0, one row.
///
/// # Safety
/// The [`VecDot`] contract; AVX2, FMA, F16C.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn iq4_nl_repacked(n: usize, x: *const u8, y: *const u8) -> f32 {
    // SAFETY: forwarded.
    unsafe { iq4_nl_rows::<1>(n, x, 0, y)[0] }
}

/// The chain of the Q8_0 family for `R` weight rows (`nb01` bytes apart) against one
/// activation row, each row its own chain (the bits are the one-row chain's): `unpack(block)`
/// gives the f16 scale and the 32 signed weight values as bytes. Only `R = 1` is used: four
/// rows interleaved read four memory streams, which measured slower on a Zen 4 than the FMA
/// latency it hides (llama.cpp interleaves the rows' bytes at load instead; not done here yet).
///
/// # Safety
/// The [`VecDot`] contract for each of the `R` rows, with `xsize` bytes per weight block; AVX2,
/// FMA, F16C.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q8_0_chain<const R: usize>(
    n: usize,
    x: *const u8,
    nb01: usize,
    xsize: usize,
    y: *const u8,
    unpack: impl Fn(*const u8) -> (u16, __m256i),
) -> [f32; R] {
    let mut acc = [0f32; R];
    for i in 0..n / 32 {
        let yb = y.wrapping_add(34 * i);
        // SAFETY: block i of the activation row (f16 d, 32 bytes).
        let (dy, qy) = unsafe { (rd::<u16>(yb), ld256(yb.add(2))) };
        for (r, a) in acc.iter_mut().enumerate() {
            let (dx, qx) = unpack(x.wrapping_add(r * nb01 + i * xsize));
            // The sign trick: |x| (unsigned) times y with x's signs; pair sums fit in i16.
            let ax = _mm256_sign_epi8(qx, qx);
            let sum = hsum_epi32(dot_u8_i8(ax, _mm256_sign_epi8(qy, qx)));
            *a = (sum as f32).mul_add(fp16_mul(dx, dy), *a);
        }
    }
    acc
}

/// Repacked Q4_0 · Q8_0, `R` rows.
///
/// # Safety
/// The [`VecDot`] contract for each of the `R` rows at `x + r·nb01`; AVX2, FMA, F16C.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4_0_rows<const R: usize>(n: usize, x: *const u8, nb01: usize, y: *const u8) -> [f32; R] {
    let unpack = |b: *const u8| {
        // SAFETY: a whole Q4_0 block (18 bytes: d, qs[16]).
        let (d, qs) = unsafe { (rd::<u16>(b), ld128(b.add(2))) };
        (d, _mm256_sub_epi8(nibbles(qs), _mm256_set1_epi8(8)))
    };
    // SAFETY: forwarded.
    unsafe { q8_0_chain::<R>(n, x, nb01, 18, y, unpack) }
}

/// Repacked IQ4_NL · Q8_0, `R` rows.
///
/// # Safety
/// The [`VecDot`] contract for each of the `R` rows at `x + r·nb01`; AVX2, FMA, F16C.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn iq4_nl_rows<const R: usize>(
    n: usize,
    x: *const u8,
    nb01: usize,
    y: *const u8,
) -> [f32; R] {
    // SAFETY: the table is 16 bytes.
    let table = _mm256_broadcastsi128_si256(unsafe {
        ld128(tessera_tensor::blocks::KVALUES_IQ4NL.as_ptr().cast())
    });
    let unpack = |b: *const u8| {
        // SAFETY: a whole IQ4_NL block (18 bytes: d, qs[16]).
        let (d, qs) = unsafe { (rd::<u16>(b), ld128(b.add(2))) };
        (d, _mm256_shuffle_epi8(table, nibbles(qs)))
    };
    // SAFETY: forwarded.
    unsafe { q8_0_chain::<R>(n, x, nb01, 18, y, unpack) }
}

/// Bytes of a Q4_K block and of a Q8_K block.
const Q4K: usize = 144;
const Q8K: usize = 292;

/// The scales and mins of the eight sub-blocks of a Q4_K block (`get_scale_min_k4`).
#[inline]
fn scales_mins(q: &[u8; 12]) -> ([i32; 8], [i32; 8]) {
    let mut sc = [0; 8];
    let mut mn = [0; 8];
    for j in 0..8 {
        let (s, m) = if j < 4 {
            (q[j] & 63, q[j + 4] & 63)
        } else {
            ((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4), (q[j + 4] >> 4) | ((q[j] >> 6) << 4))
        };
        (sc[j], mn[j]) = (i32::from(s), i32::from(m));
    }
    (sc, mn)
}

/// Repacked Q4_K · Q8_K, one row: the GEMV chain (one pair of FMAs per block), or with
/// `GEMM` the GEMM chain (one pair per 64 values).
///
/// # Safety
/// The [`VecDot`] contract; AVX2, FMA, F16C.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4_k_repacked<const GEMM: bool>(n: usize, x: *const u8, y: *const u8) -> f32 {
    // SAFETY: forwarded.
    unsafe { q4_k_rows::<GEMM, 1>(n, x, 0, y)[0] }
}

/// Repacked Q4_K · Q8_K for `R` rows, each its own chain (as [`q8_0_chain`]).
///
/// # Safety
/// The [`VecDot`] contract for each of the `R` rows at `x + r·nb01`; AVX2, FMA, F16C.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4_k_rows<const GEMM: bool, const R: usize>(
    n: usize,
    x: *const u8,
    nb01: usize,
    y: *const u8,
) -> [f32; R] {
    let mut out = [0f32; R];
    let (mut acc, mut accm) = ([0f32; R], [0f32; R]);
    for b in 0..n / 256 {
        for r in 0..R {
            let xb = x.wrapping_add(r * nb01 + b * Q4K);
            let yb = y.wrapping_add(b * Q8K);
            // SAFETY: whole Q4_K (d, dmin, scales[12], qs[128]) and Q8_K (d, qs[256],
            // bsums[16]) blocks.
            let (d, dmin, packed, dy) = unsafe {
                (rd::<u16>(xb), rd::<u16>(xb.add(2)), rd::<[u8; 12]>(xb.add(4)), rd::<f32>(yb))
            };
            let (sc, mn) = scales_mins(&packed);
            let (d, dmin) = (super::avx2::fp16(d), super::avx2::fp16(dmin));
            let (dd, dm) = (d * dy, dmin * dy);
            let mut s1 = _mm256_setzero_si256();
            let mut s2 = 0i32;
            for j in 0..4 {
                // SAFETY: 32 code bytes of the block and 64 activation bytes of it.
                let (q, y0, y1) = unsafe {
                    (
                        ld256(xb.add(16 + 32 * j)),
                        ld256(yb.add(4 + 64 * j)),
                        ld256(yb.add(36 + 64 * j)),
                    )
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
                }
                if GEMM {
                    acc[r] = (hsum_epi32(s1) as f32).mul_add(dd, acc[r]);
                    accm[r] = (s2 as f32).mul_add(dm, accm[r]);
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
                acc[r] = (hsum_epi32(s1) as f32).mul_add(dd, acc[r]);
                accm[r] = (s2 as f32).mul_add(dm, accm[r]);
            }
        }
    }
    for (o, (a, m)) in out.iter_mut().zip(acc.iter().zip(&accm)) {
        *o = a - m;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_tensor::quant;

    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn f32s(&mut self, n: usize) -> Vec<f32> {
            (0..n).map(|_| (self.next() % 2001) as f32 / 1000.0 - 1.0).collect()
        }
    }

    /// ggml's repacked chains written out in scalar code from the dequantizer's integers.
    fn reference(dtype: DType, n: usize, x: &[u8], y: &[u8], gemm: bool) -> f32 {
        let f16 = |b: &[u8]| half::f16::from_le_bytes([b[0], b[1]]).to_f32();
        match dtype {
            DType::Q4_0 | DType::IQ4_NL => {
                let mut acc = 0f32;
                for i in 0..n / 32 {
                    let (xb, yb) = (&x[18 * i..18 * i + 18], &y[34 * i..34 * i + 34]);
                    let val = |k: usize| {
                        let nib = if k < 16 { xb[2 + k] & 0xF } else { xb[2 + k - 16] >> 4 };
                        if dtype == DType::Q4_0 {
                            i32::from(nib) - 8
                        } else {
                            i32::from(tessera_tensor::blocks::KVALUES_IQ4NL[nib as usize])
                        }
                    };
                    let sum: i32 = (0..32).map(|k| val(k) * i32::from(yb[2 + k] as i8)).sum();
                    acc = (sum as f32).mul_add(f16(&xb[..2]) * f16(&yb[..2]), acc);
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
        for dtype in [DType::Q4_0, DType::IQ4_NL, DType::Q4_K] {
            let k = dtype.block_size() * 6;
            for _ in 0..20 {
                let x = quant::quantize(dtype, &rng.f32s(k)).unwrap();
                let vdt = if dtype == DType::Q4_K { DType::Q8_K } else { DType::Q8_0 };
                let y = quant::quantize(vdt, &rng.f32s(k)).unwrap();
                let (gemv, gemm) = dots(dtype).unwrap();
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
