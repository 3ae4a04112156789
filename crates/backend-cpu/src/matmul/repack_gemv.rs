//! The repacked GEMV chains ([`super::repack`]) eight weight rows at a time.
//!
//! ggml's repacked GEMV kernels (`ggml_gemv_q4_0_8x8_q8_0`, `ggml_gemv_q4_K_8x8_q8_K`, …) keep
//! eight outputs in the eight lanes of one register: per block, each lane gets the exact
//! integer dot product of its row, converted, and one FMA with its own `d·dy`. Lane `r`'s chain
//! is exactly the one-row chain of row `r`, so the kernels here give the one-row kernels'
//! bits, while the eight chains hide each other's FMA latency, the activation block is loaded
//! once for eight rows, and the horizontal sums are one `hadd` tree per eight rows instead of
//! one reduction per row.
//!
//! The weights stay in the file's layout (llama.cpp interleaves the eight rows' bytes at load;
//! the arithmetic does not depend on it): eight memory streams, one per row. Each row is
//! prefetched at the same place in the next group of eight rows (`8·stride` ahead), so every
//! stream runs one group ahead of the arithmetic. On an AVX2-only AMD EPYC (Zen 3 class, 2
//! threads) this took a random Llama-3.2-1B-shaped Q4_0 file's decode from 10.5 t/s (no
//! software prefetch) and 11.2 (768 bytes ahead, which falls into the neighbouring row of the
//! same group) to 18-20 t/s; two groups ahead measured no better.

use super::avx2::{dot_u8_i8, hsum_epi32, iq4_nl_block, iq4_nl_table, ld128, ld256, nibbles, rd};
use super::scalar::k4_scales;
use std::arch::x86_64::*;
use tessera_tensor::DType;

/// Eight weight rows (at `x`, `x + stride`, … `x + 7·stride`, `n` values each) against one
/// activation row `y` of the dot type: `out[r]` = row `r`'s repacked GEMV chain.
///
/// # Safety
/// The eight rows and `y` must be readable whole rows of `n` values, `out` writable for 8
/// f32, and the CPU must have AVX2, FMA and F16C.
pub(super) type Gemv8 =
    unsafe fn(n: usize, x: *const u8, stride: usize, y: *const u8, out: *mut f32);

/// The eight-row GEMV kernel of a type ggml repacks.
pub(super) fn gemv8(dtype: DType) -> Option<Gemv8> {
    Some(match dtype {
        DType::Q4_0 => q4_0_gemv8,
        DType::IQ4_NL => iq4_nl_gemv8,
        DType::Q4_K => q4_k_gemv8,
        _ => return None,
    })
}

/// Lane `r` = the sum of the eight i32 lanes of `v[r]` (exact: integer adds).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn hsum8_epi32(v: &[__m256i; 8]) -> __m256i {
    let a01 = _mm256_hadd_epi32(v[0], v[1]);
    let a23 = _mm256_hadd_epi32(v[2], v[3]);
    let a45 = _mm256_hadd_epi32(v[4], v[5]);
    let a67 = _mm256_hadd_epi32(v[6], v[7]);
    // Per 128-bit half: [Σv0, Σv1, Σv2, Σv3] over that half's four lanes.
    let b0 = _mm256_hadd_epi32(a01, a23);
    let b1 = _mm256_hadd_epi32(a45, a67);
    let lo = _mm256_permute2x128_si256::<0x20>(b0, b1);
    let hi = _mm256_permute2x128_si256::<0x31>(b0, b1);
    _mm256_add_epi32(lo, hi)
}

/// Lane `r` = the sum of the four i32 lanes of `v[r]` (exact).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn hsum8_epi32x4(v: &[__m128i; 8]) -> __m256i {
    let lo = _mm_hadd_epi32(_mm_hadd_epi32(v[0], v[1]), _mm_hadd_epi32(v[2], v[3]));
    let hi = _mm_hadd_epi32(_mm_hadd_epi32(v[4], v[5]), _mm_hadd_epi32(v[6], v[7]));
    _mm256_set_m128i(hi, lo)
}

/// Eight f16 values as f32 (exact).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn f16x8(h: &[u16; 8]) -> __m256 {
    // SAFETY: `h` is 16 readable bytes.
    _mm256_cvtph_ps(unsafe { ld128(h.as_ptr().cast()) })
}

/// Prefetches the bytes `ahead` past `p`.
#[inline(always)]
fn prefetch(p: *const u8, ahead: usize) {
    // SAFETY: a prefetch is a hint: it never faults, whatever the address.
    unsafe { _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(ahead).cast()) };
}

/// The Q8_0-family chain of eight rows: `unpack(block)` gives the f16 scale and the 32
/// weight values as bytes: signed, or with `OFFSET` > 0 unsigned codes whose value is
/// `code − OFFSET` (Q4_0's nibbles, multiplied as they are, with `OFFSET·Σy` taken off the
/// eight exact sums once per block: two instructions fewer per row and block than the sign
/// trick).
///
/// # Safety
/// The [`Gemv8`] contract, with `xsize` bytes per weight block.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q8_0_chain8<const OFFSET: i8>(
    n: usize,
    x: *const u8,
    stride: usize,
    xsize: usize,
    y: *const u8,
    out: *mut f32,
    unpack: impl Fn(*const u8) -> (u16, __m256i),
) {
    let mut acc = _mm256_setzero_ps();
    let ahead = 8 * stride;
    for i in 0..n / 32 {
        let yb = y.wrapping_add(34 * i);
        // SAFETY: block i of the activation row (f16 d, 32 bytes).
        let (dy, qy) = unsafe { (rd::<u16>(yb), ld256(yb.add(2))) };
        let mut p = [_mm256_setzero_si256(); 8];
        let mut d = [0u16; 8];
        for r in 0..8 {
            let xb = x.wrapping_add(r * stride + i * xsize);
            if i % 2 == 0 {
                prefetch(xb, ahead);
            }
            let (dx, qx) = unpack(xb);
            d[r] = dx;
            p[r] = if OFFSET > 0 {
                // Codes below 16 times y: pair sums fit in i16.
                dot_u8_i8(qx, qy)
            } else {
                // The sign trick: |x| (unsigned) times y with x's signs; pair sums fit in i16.
                dot_u8_i8(_mm256_sign_epi8(qx, qx), _mm256_sign_epi8(qy, qx))
            };
        }
        let mut sums = hsum8_epi32(&p);
        if OFFSET > 0 {
            let sy = hsum_epi32(dot_u8_i8(_mm256_set1_epi8(OFFSET), qy));
            sums = _mm256_sub_epi32(sums, _mm256_set1_epi32(sy));
        }
        let sums = _mm256_cvtepi32_ps(sums);
        let scale = _mm256_mul_ps(f16x8(&d), _mm256_cvtph_ps(_mm_set1_epi16(dy as i16)));
        acc = _mm256_fmadd_ps(sums, scale, acc);
    }
    // SAFETY: `out` holds eight f32 (the contract).
    unsafe { _mm256_storeu_ps(out, acc) };
}

/// Repacked Q4_0 · Q8_0, eight rows.
///
/// # Safety
/// The [`Gemv8`] contract.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4_0_gemv8(n: usize, x: *const u8, stride: usize, y: *const u8, out: *mut f32) {
    let unpack = |b: *const u8| {
        // SAFETY: `b` is a whole Q4_0 block of one of the rows (d, qs[16]).
        let (d, qs) = unsafe { (rd::<u16>(b), ld128(b.add(2))) };
        (d, nibbles(qs))
    };
    // SAFETY: forwarded.
    unsafe { q8_0_chain8::<8>(n, x, stride, 18, y, out, unpack) }
}

/// Repacked IQ4_NL · Q8_0, eight rows.
///
/// # Safety
/// The [`Gemv8`] contract.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn iq4_nl_gemv8(n: usize, x: *const u8, stride: usize, y: *const u8, out: *mut f32) {
    let table = iq4_nl_table();
    // SAFETY: `b` is a whole IQ4_NL block of one of the rows; forwarded.
    unsafe { q8_0_chain8::<0>(n, x, stride, 18, y, out, |b| iq4_nl_block(table, b)) }
}

/// Bytes of a Q4_K block and of a Q8_K block.
const Q4K: usize = 144;
const Q8K: usize = 292;

/// The byte shuffle that broadcasts i16 lane `k` of each 128-bit half.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn lane16(k: i32) -> __m256i {
    _mm256_set1_epi16((((2 * k + 1) << 8) | (2 * k)) as i16)
}

/// One Q4_K weight block against its Q8_K activation block, as both eight-row chains need
/// it: the block's `d` and `dmin` bits, the exact integer sum of each 64 values (scales
/// applied) as i32 lanes, and the mins term of each 64 values (lane j of the `__m128i`).
///
/// # Safety
/// `xb` a whole Q4_K block, `yb` a whole Q8_K block; AVX2, FMA, F16C.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4_k_block(
    xb: *const u8,
    yb: *const u8,
    pairs: __m128i,
    shuf: &[__m256i; 8],
) -> (u16, u16, [__m256i; 4], __m128i) {
    let m4 = _mm256_set1_epi8(0x0F);
    // SAFETY: a whole Q4_K block (d, dmin, scales[12], qs[128]).
    let (dx, dm, packed) =
        unsafe { (rd::<u16>(xb), rd::<u16>(xb.add(2)), rd::<[u8; 12]>(xb.add(4))) };
    // The eight scales, then the eight mins, as i16.
    let sm = k4_scales(&packed);
    // SAFETY: 16 bytes.
    let sm = _mm256_cvtepu8_epi16(unsafe { ld128(sm.as_ptr()) });
    // Lane j: min(2j)·pair(2j) + min(2j+1)·pair(2j+1).
    let mins = _mm_madd_epi16(_mm256_extracti128_si256::<1>(sm), pairs);
    let scales = _mm256_broadcastsi128_si256(_mm256_castsi256_si128(sm));
    let mut sums = [_mm256_setzero_si256(); 4];
    for (j, s) in sums.iter_mut().enumerate() {
        // SAFETY: 32 code bytes of the weight block, 64 activation bytes of its block.
        let (q, y0, y1) = unsafe {
            (ld256(xb.add(16 + 32 * j)), ld256(yb.add(4 + 64 * j)), ld256(yb.add(36 + 64 * j)))
        };
        let lo = _mm256_and_si256(q, m4);
        let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(q), m4);
        // maddubs pair sums (at most 2·15·128) times the sub-block's scale, summed in pairs by
        // one madd: exact.
        let sl = _mm256_shuffle_epi8(scales, shuf[2 * j]);
        let sh = _mm256_shuffle_epi8(scales, shuf[2 * j + 1]);
        let p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, y0), sl);
        let p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, y1), sh);
        *s = _mm256_add_epi32(p0, p1);
    }
    (dx, dm, sums, mins)
}

/// Repacked Q4_K · Q8_K, eight rows: the GEMV chain (one pair of FMAs per block).
///
/// # Safety
/// The [`Gemv8`] contract.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4_k_gemv8(n: usize, x: *const u8, stride: usize, y: *const u8, out: *mut f32) {
    let shuf: [__m256i; 8] = std::array::from_fn(|k| lane16(k as i32));
    let (mut acc, mut accm) = (_mm256_setzero_ps(), _mm256_setzero_ps());
    let ahead = 8 * stride;
    for b in 0..n / 256 {
        let yb = y.wrapping_add(b * Q8K);
        // SAFETY: a whole Q8_K block (d, qs[256], bsums[16]).
        let (dy, bs) = unsafe { (rd::<f32>(yb), ld256(yb.add(260))) };
        // The eight sub-block sums of the activations (pairs of 16-value sums; exact in i16).
        let pairs = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256::<1>(bs));
        let mut s1 = [_mm256_setzero_si256(); 8];
        let mut s2 = [_mm_setzero_si128(); 8];
        let (mut d, mut dmin) = ([0u16; 8], [0u16; 8]);
        for r in 0..8 {
            let xb = x.wrapping_add(r * stride + b * Q4K);
            prefetch(xb, ahead);
            prefetch(xb.wrapping_add(64), ahead);
            prefetch(xb.wrapping_add(128), ahead);
            // SAFETY: whole blocks (the contract); the caller's features.
            let (dx, dm, sums, mins) = unsafe { q4_k_block(xb, yb, pairs, &shuf) };
            (d[r], dmin[r]) = (dx, dm);
            s2[r] = mins;
            let s01 = _mm256_add_epi32(sums[0], sums[1]);
            s1[r] = _mm256_add_epi32(s01, _mm256_add_epi32(sums[2], sums[3]));
        }
        let dy = _mm256_set1_ps(dy);
        let s1 = _mm256_cvtepi32_ps(hsum8_epi32(&s1));
        let s2 = _mm256_cvtepi32_ps(hsum8_epi32x4(&s2));
        acc = _mm256_fmadd_ps(s1, _mm256_mul_ps(f16x8(&d), dy), acc);
        accm = _mm256_fmadd_ps(s2, _mm256_mul_ps(f16x8(&dmin), dy), accm);
    }
    // SAFETY: `out` holds eight f32 (the contract).
    unsafe { _mm256_storeu_ps(out, _mm256_sub_ps(acc, accm)) };
}

/// Repacked Q4_K · Q8_K, eight rows: the GEMM chain (one pair of FMAs per 64 values), which
/// llama.cpp's 4x8 GEMM kernel runs on the activation rows `0..ne11 − ne11 % 4`. Lane `r` is
/// row `r`'s one-row GEMM chain bit for bit: the integer sums are exact in any order, and the
/// f32 steps (`d·dy`, `dmin·dy`, one FMA each per 64 values) are the same.
///
/// # Safety
/// The [`Gemv8`] contract.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q4_k_gemm8(
    n: usize,
    x: *const u8,
    stride: usize,
    y: *const u8,
    out: *mut f32,
) {
    let shuf: [__m256i; 8] = std::array::from_fn(|k| lane16(k as i32));
    let (mut acc, mut accm) = (_mm256_setzero_ps(), _mm256_setzero_ps());
    for b in 0..n / 256 {
        let yb = y.wrapping_add(b * Q8K);
        // SAFETY: a whole Q8_K block (d, qs[256], bsums[16]).
        let (dy, bs) = unsafe { (rd::<f32>(yb), ld256(yb.add(260))) };
        // The eight sub-block sums of the activations (pairs of 16-value sums; exact in i16).
        let pairs = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256::<1>(bs));
        // Per 64 values j: each row's integer sum, and its mins term.
        let mut s1 = [[_mm256_setzero_si256(); 8]; 4];
        let mut s2 = [[0i32; 8]; 4];
        let (mut d, mut dmin) = ([0u16; 8], [0u16; 8]);
        for r in 0..8 {
            let xb = x.wrapping_add(r * stride + b * Q4K);
            // SAFETY: whole blocks (the contract); the caller's features.
            let (dx, dm, sums, m) = unsafe { q4_k_block(xb, yb, pairs, &shuf) };
            (d[r], dmin[r]) = (dx, dm);
            s2[0][r] = _mm_extract_epi32::<0>(m);
            s2[1][r] = _mm_extract_epi32::<1>(m);
            s2[2][r] = _mm_extract_epi32::<2>(m);
            s2[3][r] = _mm_extract_epi32::<3>(m);
            for (s1j, sum) in s1.iter_mut().zip(sums) {
                s1j[r] = sum;
            }
        }
        let dy = _mm256_set1_ps(dy);
        let dd = _mm256_mul_ps(f16x8(&d), dy);
        let dm = _mm256_mul_ps(f16x8(&dmin), dy);
        for j in 0..4 {
            let a = _mm256_cvtepi32_ps(hsum8_epi32(&s1[j]));
            // SAFETY: 8 i32.
            let m = _mm256_cvtepi32_ps(unsafe { ld256(s2[j].as_ptr().cast()) });
            acc = _mm256_fmadd_ps(a, dd, acc);
            accm = _mm256_fmadd_ps(m, dm, accm);
        }
    }
    // SAFETY: `out` holds eight f32 (the contract).
    unsafe { _mm256_storeu_ps(out, _mm256_sub_ps(acc, accm)) };
}

#[cfg(test)]
mod tests {
    use super::super::repack::dots;
    use super::super::tests::Rng;
    use super::*;
    use crate::SimdLevel;
    use tessera_tensor::quant;

    /// Each lane is the one-row GEMV chain of its row, bit for bit.
    #[test]
    fn eight_rows_match_the_one_row_chains() {
        if SimdLevel::detect() < SimdLevel::Avx2 {
            eprintln!("skipped: no AVX2");
            return;
        }
        let mut rng = Rng(7);
        for dtype in [DType::Q4_0, DType::IQ4_NL, DType::Q4_K] {
            let k = dtype.block_size() * 7;
            let vdt = if dtype == DType::Q4_K { DType::Q8_K } else { DType::Q8_0 };
            for _ in 0..10 {
                let x = quant::quantize(dtype, &rng.f32s(8 * k)).unwrap();
                let y = quant::quantize(vdt, &rng.f32s(k)).unwrap();
                let stride = x.len() / 8;
                let mut got = [0f32; 8];
                // SAFETY: eight rows of k values, one activation row; AVX2 checked above.
                unsafe {
                    gemv8(dtype).unwrap()(k, x.as_ptr(), stride, y.as_ptr(), got.as_mut_ptr())
                };
                let (gemv, gemm) = dots(dtype).unwrap();
                for (r, g) in got.iter().enumerate() {
                    // SAFETY: as above, one row.
                    let want = unsafe { gemv(k, x[r * stride..].as_ptr(), y.as_ptr()) };
                    assert_eq!(g.to_bits(), want.to_bits(), "{dtype} row {r}");
                }
                if dtype == DType::Q4_K {
                    // SAFETY: as above.
                    unsafe { q4_k_gemm8(k, x.as_ptr(), stride, y.as_ptr(), got.as_mut_ptr()) };
                    for (r, g) in got.iter().enumerate() {
                        // SAFETY: as above, one row.
                        let want = unsafe { gemm(k, x[r * stride..].as_ptr(), y.as_ptr()) };
                        assert_eq!(g.to_bits(), want.to_bits(), "GEMM {dtype} row {r}");
                    }
                }
            }
        }
    }
}
