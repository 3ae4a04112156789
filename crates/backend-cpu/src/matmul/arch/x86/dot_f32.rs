//! F32 · F32 in llama.cpp's two orders. A product with one activation row (and every
//! MUL_MAT_ID row) goes through `ggml_vec_dot_f32`: four accumulators of one vector width over
//! steps of four vectors, reduced `(0 + 2) + (1 + 3)`, the tail past the last whole step added
//! one product at a time. A batch of two or more rows goes through llamafile's tinyBLAS when the
//! row length is a multiple of the vector width and the weight rows of four: one accumulator
//! per output in `k` order, reduced once.

// The AVX-512 intrinsics are stable since Rust 1.89 (see `avx512`).
#![allow(clippy::incompatible_msrv)]

use super::avx2::hsum_ps;
use super::avx512::reduce_add;
use crate::matmul::VecDot;
use std::arch::x86_64::*;

/// `ggml_vec_dot_f32` of an AVX2 build (`GGML_F32x8_REDUCE`: the pairs, then the 128-bit
/// halves, then two horizontal adds).
///
/// # Safety
/// The [`VecDot`] contract, and AVX2/FMA.
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::matmul) unsafe fn vec_dot_avx2(n: usize, x: *const u8, y: *const u8) -> f32 {
    let (x, y) = (x.cast::<f32>(), y.cast::<f32>());
    let np = n & !31;
    let mut acc = [_mm256_setzero_ps(); 4];
    for i in (0..np).step_by(32) {
        for (k, a) in acc.iter_mut().enumerate() {
            // SAFETY: elements i + 8k .. i + 8k + 8 <= np of both rows.
            let (u, v) =
                unsafe { (_mm256_loadu_ps(x.add(i + 8 * k)), _mm256_loadu_ps(y.add(i + 8 * k))) };
            *a = _mm256_fmadd_ps(u, v, *a);
        }
    }
    let s0 = _mm256_add_ps(_mm256_add_ps(acc[0], acc[2]), _mm256_add_ps(acc[1], acc[3]));
    let t0 = _mm_add_ps(_mm256_castps256_ps128(s0), _mm256_extractf128_ps::<1>(s0));
    let t1 = _mm_hadd_ps(t0, t0);
    let mut sum = _mm_cvtss_f32(_mm_hadd_ps(t1, t1));
    for i in np..n {
        // SAFETY: i < n.
        sum += unsafe { x.add(i).read_unaligned() * y.add(i).read_unaligned() };
    }
    sum
}

/// `ggml_vec_dot_f32` of an AVX-512 build (`GGML_F32x16_REDUCE`).
///
/// # Safety
/// The [`VecDot`] contract, and AVX-512 F/BW/VL/DQ.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
pub(in crate::matmul) unsafe fn vec_dot_avx512(n: usize, x: *const u8, y: *const u8) -> f32 {
    let (x, y) = (x.cast::<f32>(), y.cast::<f32>());
    let np = n & !63;
    let mut acc = [_mm512_setzero_ps(); 4];
    for i in (0..np).step_by(64) {
        for (k, a) in acc.iter_mut().enumerate() {
            // SAFETY: elements i + 16k .. i + 16k + 16 <= np of both rows.
            let (u, v) =
                unsafe { (_mm512_loadu_ps(x.add(i + 16 * k)), _mm512_loadu_ps(y.add(i + 16 * k))) };
            *a = _mm512_fmadd_ps(u, v, *a);
        }
    }
    let s0 = _mm512_add_ps(_mm512_add_ps(acc[0], acc[2]), _mm512_add_ps(acc[1], acc[3]));
    let mut sum = reduce_add(s0);
    for i in np..n {
        // SAFETY: i < n.
        sum += unsafe { x.add(i).read_unaligned() * y.add(i).read_unaligned() };
    }
    sum
}

/// tinyBLAS's F32 order at AVX2: one 8-lane accumulator in `k` order, summed as
/// [`hsum_ps`]. `n` must be a multiple of 8.
///
/// # Safety
/// The [`VecDot`] contract, `n % 8 == 0`, and AVX2/FMA.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn tinyblas_avx2(n: usize, x: *const u8, y: *const u8) -> f32 {
    let (x, y) = (x.cast::<f32>(), y.cast::<f32>());
    let mut acc = _mm256_setzero_ps();
    for i in (0..n).step_by(8) {
        // SAFETY: elements i..i + 8 <= n of both rows.
        let (u, v) = unsafe { (_mm256_loadu_ps(x.add(i)), _mm256_loadu_ps(y.add(i))) };
        acc = _mm256_fmadd_ps(u, v, acc);
    }
    hsum_ps(acc)
}

/// tinyBLAS's F32 order at AVX-512: one 16-lane accumulator, reduced as
/// `_mm512_reduce_add_ps`. `n` must be a multiple of 16.
///
/// # Safety
/// The [`VecDot`] contract, `n % 16 == 0`, and AVX-512 F/BW/VL/DQ.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn tinyblas_avx512(n: usize, x: *const u8, y: *const u8) -> f32 {
    let (x, y) = (x.cast::<f32>(), y.cast::<f32>());
    let mut acc = _mm512_setzero_ps();
    for i in (0..n).step_by(16) {
        // SAFETY: elements i..i + 16 <= n of both rows.
        let (u, v) = unsafe { (_mm512_loadu_ps(x.add(i)), _mm512_loadu_ps(y.add(i))) };
        acc = _mm512_fmadd_ps(u, v, acc);
    }
    reduce_add(acc)
}

/// [`tinyblas_avx512`] for four weight rows against four activation rows at once (a
/// [`TileFn`](crate::matmul::TileFn)): sixteen accumulators in registers, each weight and
/// activation vector loaded once per step instead of once per output, each output's chain
/// [`tinyblas_avx512`]'s (the same bits). A vision encoder's F32 products ran at 30% of the
/// FMA units' rate through the one-output dot.
///
/// # Safety
/// The [`VecDot`] contract for every pair, `n % 16 == 0`, `outs[..4]` each with room for four
/// f32, and AVX-512 F/BW/VL/DQ.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn tinyblas_tile_avx512(
    n: usize,
    xs: [*const u8; 4],
    ys: &[*const u8; 8],
    outs: &[*mut f32; 8],
) {
    let xs = xs.map(|x| x.cast::<f32>());
    let yc: [*const f32; 4] = std::array::from_fn(|c| ys[c].cast::<f32>());
    let mut acc = [[_mm512_setzero_ps(); 4]; 4];
    for i in (0..n).step_by(16) {
        // SAFETY: elements i..i + 16 <= n of the four weight rows.
        let a = xs.map(|x| unsafe { _mm512_loadu_ps(x.add(i)) });
        for (c, y) in yc.iter().enumerate() {
            // SAFETY: elements i..i + 16 <= n of activation row c.
            let b = unsafe { _mm512_loadu_ps(y.add(i)) };
            for (r, ar) in a.iter().enumerate() {
                acc[r][c] = _mm512_fmadd_ps(*ar, b, acc[r][c]);
            }
        }
    }
    for (c, out) in outs.iter().take(4).enumerate() {
        for (r, row) in acc.iter().enumerate() {
            // SAFETY: outs[c] has room for four results (caller).
            unsafe { out.add(r).write(reduce_add(row[c])) };
        }
    }
}

/// The register tile of [`tinyblas`]'s kernel where one exists (AVX-512: four by four).
pub(in crate::matmul) fn tinyblas_tile(avx512: bool) -> Option<crate::matmul::TileFn> {
    avx512.then_some(tinyblas_tile_avx512 as crate::matmul::TileFn)
}

/// tinyBLAS's F32 kernel at the AVX2 or AVX-512 level, where llama.cpp takes it for a product
/// of `m` weight rows of `k` values by `n1` activation rows (contiguous): `n1 >= 2`, `k` a
/// multiple of the vector width and `m` of four.
pub(in crate::matmul) fn tinyblas(avx512: bool, m: usize, k: usize, n1: usize) -> Option<VecDot> {
    let width = if avx512 { 16 } else { 8 };
    if n1 < 2 || k % width != 0 || m % 4 != 0 {
        return None;
    }
    Some(if avx512 { tinyblas_avx512 } else { tinyblas_avx2 })
}
