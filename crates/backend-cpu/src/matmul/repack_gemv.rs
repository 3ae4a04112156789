//! The repacked GEMV chain of IQ4_NL weights ([`super::repack`]) eight weight rows at a time,
//! in the file's layout (Q4_0 and Q4_K are stored interleaved at load instead and have
//! kernels of their own: [`super::interleaved`]).
//!
//! ggml's repacked GEMV kernels (`ggml_gemv_iq4_nl_8x8_q8_0` and its Q4_0/Q4_K siblings) keep
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
//! threads) this took a random Llama-3.2-1B-shaped Q4_0 file's decode (when Q4_0 still took
//! this path) from 10.5 t/s (no software prefetch) and 11.2 (768 bytes ahead, which falls into
//! the neighbouring row of the same group) to 18-20 t/s; two groups ahead measured no better.
//! Interleaved at load, Q4_0 is faster again (`interleaved`); IQ4_NL could follow (its table
//! values are signed, so its AVX2 sums need the sign trick or a bias wider than `maddubs`
//! allows).

use super::avx2::{dot_u8_i8, iq4_nl_block, iq4_nl_table, ld128, ld256, rd};
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
        DType::IQ4_NL => iq4_nl_gemv8,
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
/// signed weight values as bytes.
///
/// # Safety
/// The [`Gemv8`] contract, with `xsize` bytes per weight block.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q8_0_chain8(
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
            // The sign trick: |x| (unsigned) times y with x's signs; pair sums fit in i16.
            p[r] = dot_u8_i8(_mm256_sign_epi8(qx, qx), _mm256_sign_epi8(qy, qx));
        }
        let sums = _mm256_cvtepi32_ps(hsum8_epi32(&p));
        let scale = _mm256_mul_ps(f16x8(&d), _mm256_cvtph_ps(_mm_set1_epi16(dy as i16)));
        acc = _mm256_fmadd_ps(sums, scale, acc);
    }
    // SAFETY: `out` holds eight f32 (the contract).
    unsafe { _mm256_storeu_ps(out, acc) };
}

/// Repacked IQ4_NL · Q8_0, eight rows.
///
/// # Safety
/// The [`Gemv8`] contract.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn iq4_nl_gemv8(n: usize, x: *const u8, stride: usize, y: *const u8, out: *mut f32) {
    let table = iq4_nl_table();
    // SAFETY: `b` is a whole IQ4_NL block of one of the rows; forwarded.
    unsafe { q8_0_chain8(n, x, stride, 18, y, out, |b| iq4_nl_block(table, b)) }
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
        for dtype in [DType::IQ4_NL] {
            let k = dtype.block_size() * 7;
            let vdt = DType::Q8_0;
            for _ in 0..10 {
                let x = quant::quantize(dtype, &rng.f32s(8 * k)).unwrap();
                let y = quant::quantize(vdt, &rng.f32s(k)).unwrap();
                let stride = x.len() / 8;
                let mut got = [0f32; 8];
                // SAFETY: eight rows of k values, one activation row; AVX2 checked above.
                unsafe {
                    gemv8(dtype).unwrap()(k, x.as_ptr(), stride, y.as_ptr(), got.as_mut_ptr())
                };
                let (gemv, _) = dots(dtype).unwrap();
                for (r, g) in got.iter().enumerate() {
                    // SAFETY: as above, one row.
                    let want = unsafe { gemv(k, x[r * stride..].as_ptr(), y.as_ptr()) };
                    assert_eq!(g.to_bits(), want.to_bits(), "{dtype} row {r}");
                }
            }
        }
    }
}
