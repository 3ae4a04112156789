//! AVX-512 VNNI register tiles of the Q8_0 family (Q4_0, Q5_0, Q8_0, IQ4_NL): four weight
//! rows against eight Q8_0 activation rows, for batched products (prompt processing).
//!
//! # Same bits as the one-row kernels
//!
//! llama.cpp multiplies these types, at 4+ rows, with llamafile's tinyBLAS: per output one
//! 8-lane f32 accumulator, blocks in order, `acc = fma(dx·dy, lanes, acc)` where lane `m`
//! holds the integer sum of the block's products `4m..4m+4`, then a horizontal sum. The AVX2
//! kernels ([`super::avx2`]) reproduce that bit for bit. This tile computes the same 8-lane
//! integer sums, the same scale products and the same fused multiply-adds in the same order,
//! so every output is the same f32 as theirs; only the packing differs:
//!
//! - Two activation rows share one 512-bit register (row `c` in the low 256 bits, `c + 1`
//!   in the high), the weight block is broadcast to both halves, so one `vpdpbusd` computes
//!   the lanes of two outputs.
//! - `vpdpbusd` multiplies unsigned by signed bytes. Instead of ggml's sign trick the weights
//!   are unpacked *biased* to unsigned (`q + b`, `b` = 8, 16 or 128) and each lane starts
//!   from `-b·Σy` of its four activation bytes: `Σ(q+b)·y − b·Σy = Σq·y`, exactly, in i32.
//!   The correction is computed once per activation block and shared by the four weight rows.
//!
//! The scales `dx·dy` are f32 products of the exactly converted f16 scales, as in tinyBLAS.

// The AVX-512 intrinsics are stable since Rust 1.89 (the toolchain here is newer); see the
// note in `avx512.rs`.
#![allow(clippy::incompatible_msrv)]

use super::avx2::{ld128, ld256, rd};
use super::vnni_matvec::{nibbles_at, q5_0_biased};
#[cfg(doc)]
use crate::matmul::TileFn;
use std::arch::x86_64::*;

/// The tile loop over four weight rows and `P` pairs of activation rows. `unpack(block)`
/// gives a weight block's f16 scale and its 32 values plus `bias`, as unsigned bytes.
/// Result `[weight row][pair]`, the pair's first row in lanes 0-7, its second in 8-15.
///
/// # Safety
/// The [`TileFn`] contract (for `2P` activation rows) with `xsize` bytes per weight block;
/// AVX-512 F/BW/VL/DQ/VNNI, AVX2, FMA, F16C.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn q8_0_tile<const P: usize>(
    n: usize,
    x: [*const u8; 4],
    xsize: usize,
    y: [[*const u8; 2]; P],
    bias: u8,
    unpack: impl Fn(*const u8) -> (u16, __m256i),
) -> [[__m512; P]; 4] {
    let zero = _mm512_setzero_si512();
    let bias = _mm512_set1_epi8(bias as i8);
    // Lanes 0-7 take the pair's first scale, lanes 8-15 its second.
    let spread = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
    let mut acc = [[_mm512_setzero_ps(); P]; 4];
    for i in 0..n / 32 {
        let mut qy = [zero; P];
        let mut start = [zero; P];
        let mut dy = [_mm512_setzero_ps(); P];
        for (h, pair) in y.iter().enumerate() {
            let [b0, b1] = pair.map(|r| r.wrapping_add(34 * i));
            // SAFETY: block i of both activation rows (34 bytes: d, qs[32]).
            let (q0, q1, d0, d1) =
                unsafe { (ld256(b0.add(2)), ld256(b1.add(2)), rd::<u16>(b0), rd::<u16>(b1)) };
            qy[h] = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(q0), q1);
            start[h] = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, bias, qy[h]));
            let d = _mm_cvtph_ps(_mm_cvtsi32_si128((u32::from(d0) | (u32::from(d1) << 16)) as i32));
            dy[h] = _mm512_permutexvar_ps(spread, _mm512_castps128_ps512(d));
        }
        for (r, a) in acc.iter_mut().enumerate() {
            let (dx, qx) = unpack(x[r].wrapping_add(i * xsize));
            let qx = _mm512_broadcast_i64x4(qx);
            let dx = _mm512_broadcastss_ps(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(dx))));
            for h in 0..P {
                let p = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(start[h], qx, qy[h]));
                a[h] = _mm512_fmadd_ps(_mm512_mul_ps(dx, dy[h]), p, a[h]);
            }
        }
    }
    acc
}

/// The horizontal sums of the 32 eight-lane groups of a 4x8 tile's accumulators
/// (`acc[row][pair]`: column `2·pair` in lanes 0-7, `2·pair + 1` in lanes 8-15), each
/// summed exactly as [`hsum_ps`](super::avx2::hsum_ps) sums one group (`x_j + x_{j+4}`, then
/// lanes 0+2 and 1+3, then those two), but sixteen groups per instruction: 42 shuffles and
/// adds instead of ~190. The registers go in in the order that leaves each column's four
/// sums in one 128-bit quarter, stored at `outs[column]` in one go.
///
/// # Safety
/// `outs[..8]` must each have room for four f32; AVX-512 F/DQ.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn reduce_tile(acc: [[__m512; 4]; 4], outs: &[*mut f32; 8]) {
    // Position 16t + 4r + q (in v[position / 2], half position % 2) holds row r of column
    // 4t + q; a register holds columns 2h and 2h + 1 of one row.
    let mut v = [_mm512_setzero_ps(); 16];
    for (r, row) in acc.iter().enumerate() {
        for (h, &a) in row.iter().enumerate() {
            v[8 * (h / 2) + 2 * r + h % 2] = a;
        }
    }
    // Step 1: each 128-bit quarter holds one group's x_j + x_{j+4}; s1[m] holds positions
    // 4m..4m+4, one per quarter.
    let s1: [__m512; 8] = std::array::from_fn(|m| {
        let (a, b) = (v[2 * m], v[2 * m + 1]);
        let lo = _mm512_shuffle_f32x4::<0b10_00_10_00>(a, b);
        let hi = _mm512_shuffle_f32x4::<0b11_01_11_01>(a, b);
        _mm512_add_ps(hi, lo)
    });
    // Step 2: quarter q of s2[p] holds (r0 + r2, r1 + r3) of position 8p + q, then of
    // 8p + 4 + q.
    let s2: [__m512; 4] = std::array::from_fn(|p| {
        let (e, f) = (s1[2 * p], s1[2 * p + 1]);
        let a = _mm512_shuffle_ps::<0b01_00_01_00>(e, f);
        let b = _mm512_shuffle_ps::<0b11_10_11_10>(e, f);
        _mm512_add_ps(a, b)
    });
    // Step 3: lane 4q + j of s3 holds the sum of position 16t + 4j + q: row j of column
    // 4t + q.
    for t in 0..2 {
        let (g, h) = (s2[2 * t], s2[2 * t + 1]);
        let s3 = _mm512_add_ps(
            _mm512_shuffle_ps::<0b10_00_10_00>(g, h),
            _mm512_shuffle_ps::<0b11_01_11_01>(g, h),
        );
        let quarters = [
            _mm512_castps512_ps128(s3),
            _mm512_extractf32x4_ps::<1>(s3),
            _mm512_extractf32x4_ps::<2>(s3),
            _mm512_extractf32x4_ps::<3>(s3),
        ];
        for (q, quarter) in quarters.into_iter().enumerate() {
            // SAFETY: outs[4t + q] has room for four f32 (the caller's contract).
            unsafe { _mm_storeu_ps(outs[4 * t + q], quarter) };
        }
    }
}

macro_rules! vnni_tile {
    ($name:ident, $size:expr, $bias:expr, $unpack:expr) => {
        /// A 4x8 tile: four weight rows against eight Q8_0 activation rows.
        ///
        /// # Safety
        /// The [`TileFn`] contract; AVX-512 F/BW/VL/DQ/VNNI, AVX2, FMA, F16C.
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
        pub(in crate::matmul) unsafe fn $name(
            n: usize,
            x: [*const u8; 4],
            y: &[*const u8; 8],
            outs: &[*mut f32; 8],
        ) {
            let unpack = $unpack;
            let pairs = [0, 2, 4, 6].map(|c| [y[c], y[c + 1]]);
            // SAFETY: forwarded; `unpack` reads one whole block of a weight row.
            let acc = unsafe { q8_0_tile::<4>(n, x, $size, pairs, $bias, unpack) };
            // SAFETY: the TileFn contract gives every outs[c] room for four results.
            unsafe { reduce_tile(acc, outs) };
        }
    };
}

vnni_tile!(q4_0_t48, 18, 8, |b: *const u8| {
    // SAFETY: a whole Q4_0 block (18 bytes: d, qs[16]).
    unsafe { (rd::<u16>(b), nibbles_at(b.add(2))) }
});
vnni_tile!(q5_0_t48, 22, 16, |b: *const u8| {
    // SAFETY: a whole Q5_0 block (22 bytes: d, qh[4], qs[16]).
    unsafe { (rd::<u16>(b), q5_0_biased(b)) }
});
vnni_tile!(q8_0_t48, 34, 128, |b: *const u8| {
    // SAFETY: a whole Q8_0 block (34 bytes: d, qs[32]).
    let (d, qs) = unsafe { (rd::<u16>(b), ld256(b.add(2))) };
    (d, _mm256_xor_si256(qs, _mm256_set1_epi8(0x80u8 as i8)))
});
vnni_tile!(iq4_nl_t48, 18, 128, |b: *const u8| {
    // SAFETY: a whole IQ4_NL block (18 bytes: d, qs[16]); the table is 16 bytes.
    let (d, idx, table) = unsafe {
        (
            rd::<u16>(b),
            nibbles_at(b.add(2)),
            ld128(tessera_tensor::blocks::KVALUES_IQ4NL.as_ptr().cast()),
        )
    };
    let biased = _mm_xor_si128(table, _mm_set1_epi8(0x80u8 as i8));
    (d, _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(biased), idx))
});
