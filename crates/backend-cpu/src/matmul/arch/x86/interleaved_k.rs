//! Products of interleaved Q4_K weights ([`crate::matmul::interleaved`]'s layout: per block of a
//! group, the eight rows' `d`, their `dmin`, their 12 scale bytes as three 4-byte words, then
//! their 128 code bytes as 32 words, word `w` of row `r` at `32 + 32·w + 4·r`) with Q8_K
//! activation rows, in ggml's repacked chains ([`super::repack`]): lane `r` of every register
//! is row `r`.
//!
//! Per 64 values `j` (codes `32j..32j+32` of each row: the low nibbles are sub-block `2j`,
//! the high ones `2j+1`), eight 32-byte words give all eight rows' exact sums of the two
//! sub-blocks, each then times its row's 6-bit scale (unpacked for the eight rows at once, in
//! lanes, by ggml's `utmp` steps on vectors); the mins term is each row's two mins times the
//! activation's two sub-block sums (one `madd`). The GEMV chain sums the four `j` into one
//! pair of FMAs per block, the GEMM chain (llama.cpp's 4x8 kernel, activation rows
//! `0..ne11 − ne11 % 4`) takes one pair per `j`: `acc = fma(f32(s1), d·dy, acc)`,
//! `accm = fma(f32(s2), dmin·dy, accm)`, output `acc − accm`. The integers are exact in any
//! order, so every output is the one-row chain's bits (tests).

// The AVX-512 intrinsics are stable since Rust 1.89 (the toolchain here is newer); see the
// note in `avx512.rs`.
#![allow(clippy::incompatible_msrv)]

use super::avx2::{ld128, ld256, rd};
use super::vnni_matvec::PREFETCH;
use crate::matmul::layouts::GROUP;
use std::arch::x86_64::*;

/// Bytes of one Q4_K block of a group's eight rows.
const GROUP_BLOCK: usize = GROUP * 144;
/// Bytes of one Q8_K block (f32 d, qs[256], bsums[16]).
const Q8K: usize = 292;

/// The weight side of a group kernel: `count` groups of eight interleaved rows of `n` values,
/// the first at `x`, the others `stride` bytes apart.
#[derive(Clone, Copy)]
pub(in crate::matmul) struct WeightGroups {
    /// The first group.
    pub(in crate::matmul) x: *const u8,
    /// Values per row.
    pub(in crate::matmul) n: usize,
    /// Bytes from one group to the next.
    pub(in crate::matmul) stride: usize,
    /// Groups.
    pub(in crate::matmul) count: usize,
}

/// `N` Q8_K activation rows (`n` values each, at `ys`) against the weight groups `w` (eight
/// interleaved Q4_K or Q2_K rows each): `outs[j]` gets the group's eight outputs per group,
/// consecutive.
///
/// # Safety
/// The weight groups and activation rows readable as said, `outs[j]` writable for
/// `8 · w.count` f32; the CPU has the function's features (AVX-512 VNNI and VL for the VNNI
/// one).
pub(in crate::matmul) type GroupFn =
    unsafe fn(w: WeightGroups, ys: &[*const u8], outs: &[*mut f32]);

/// A byte shuffle taking, in every 32-bit lane, bytes `k[0..4]` of the same lane (a negative
/// entry gives zero).
#[inline]
#[target_feature(enable = "avx2")]
pub(in crate::matmul) fn lane_bytes(k: [i8; 4]) -> __m256i {
    let mut b = [0i8; 32];
    for (i, v) in b.iter_mut().enumerate() {
        let (lane, pos) = ((i % 16) / 4, i % 4);
        *v = if k[pos] < 0 { -128 } else { 4 * lane as i8 + k[pos] };
    }
    // SAFETY: 32 readable bytes.
    unsafe { ld256(b.as_ptr().cast()) }
}

/// The group loop of one instruction set: `$add(s, codes, y)` adds four products per lane to
/// a sub-block's sums, `$sum` adds two such sums, `$scale(s, scale)` gives them times the lane's scale (`$vnni`: the
/// scale as an i32, else as an i16 pair).
macro_rules! k_kernel {
    ($name:ident, $features:literal, $vnni:expr, $add:expr, $sum:expr, $scale:expr) => {
        /// The [`GroupFn`] of one instruction set for `N` activation rows, in the GEMM chain
        /// or the GEMV chain.
        ///
        /// # Safety
        /// The [`GroupFn`] contract.
        #[target_feature(enable = $features)]
        unsafe fn $name<const N: usize, const GEMM: bool>(
            w: WeightGroups,
            ys: &[*const u8],
            outs: &[*mut f32],
        ) {
            let WeightGroups { x, n, stride: gstride, count: ngroups } = w;
            let ys: [*const u8; N] = std::array::from_fn(|j| ys[j]);
            let m4 = _mm256_set1_epi8(0x0F);
            let (m1, m2, m3) = (
                _mm256_set1_epi32(0x3f3f_3f3f),
                _mm256_set1_epi32(0x0f0f_0f0f),
                _mm256_set1_epi32(0x0303_0303),
            );
            // Byte k of each lane's word, as an i32 (VNNI) or as an i16 pair (AVX2).
            let scale_of: [__m256i; 4] = std::array::from_fn(|k| {
                let k = k as i8;
                if $vnni {
                    lane_bytes([k, -1, -1, -1])
                } else {
                    lane_bytes([k, -1, k, -1])
                }
            });
            // Bytes (0, 1) or (2, 3) of each lane's word as an i16 pair.
            let mins_of = [lane_bytes([0, -1, 1, -1]), lane_bytes([2, -1, 3, -1])];
            for g in 0..ngroups {
                let gx = x.wrapping_add(g * gstride);
                let mut acc = [_mm256_setzero_ps(); N];
                let mut accm = [_mm256_setzero_ps(); N];
                for b in 0..n / 256 {
                    let xb = gx.wrapping_add(b * GROUP_BLOCK);
                    // SAFETY: the group's block b: scales, mins and scale words (the contract).
                    let (d, dmin, u0, u1, u2) = unsafe {
                        (
                            _mm256_cvtph_ps(ld128(xb)),
                            _mm256_cvtph_ps(ld128(xb.add(16))),
                            ld256(xb.add(32)),
                            ld256(xb.add(64)),
                            ld256(xb.add(96)),
                        )
                    };
                    // ggml's utmp unpacking, lane by lane: scales 0-3, 4-7, mins 0-3, 4-7.
                    let hi6 = |u: __m256i| {
                        _mm256_slli_epi32::<4>(_mm256_and_si256(_mm256_srli_epi32::<6>(u), m3))
                    };
                    let sc = [
                        _mm256_and_si256(u0, m1),
                        _mm256_or_si256(_mm256_and_si256(u2, m2), hi6(u0)),
                    ];
                    let mn = [
                        _mm256_and_si256(u1, m1),
                        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32::<4>(u2), m2), hi6(u1)),
                    ];
                    let mut dd = [_mm256_setzero_ps(); N];
                    let mut dm = [_mm256_setzero_ps(); N];
                    // Per row: the activation's sub-block sums, in pairs (2j, 2j+1) per word.
                    let mut pairs = [[0i32; 4]; N];
                    for j in 0..N {
                        let yb = ys[j].wrapping_add(b * Q8K);
                        // SAFETY: block b of activation row j (d, qs, bsums).
                        let (dy, bs) = unsafe { (rd::<f32>(yb), ld256(yb.add(260))) };
                        let p = _mm_hadd_epi16(
                            _mm256_castsi256_si128(bs),
                            _mm256_extracti128_si256::<1>(bs),
                        );
                        // SAFETY: 16 writable bytes.
                        unsafe { _mm_storeu_si128(pairs[j].as_mut_ptr().cast(), p) };
                        let dy = _mm256_set1_ps(dy);
                        (dd[j], dm[j]) = (_mm256_mul_ps(d, dy), _mm256_mul_ps(dmin, dy));
                    }
                    let mut s1 = [_mm256_setzero_si256(); N];
                    let mut s2 = [_mm256_setzero_si256(); N];
                    for q in 0..4 {
                        let codes = xb.wrapping_add(128 + 256 * q);
                        for l in 0..4 {
                            // A hint only: never faults.
                            _mm_prefetch::<_MM_HINT_T0>(
                                codes.wrapping_add(PREFETCH + 64 * l).cast(),
                            );
                        }
                        // Two independent sums per sub-block and row (even and odd words),
                        // so the multiply-adds do not wait on each other; exact in any order.
                        let mut il = [[_mm256_setzero_si256(); 2]; N];
                        let mut ih = [[_mm256_setzero_si256(); 2]; N];
                        for c in 0..8 {
                            // SAFETY: code word 8q + c of the group's block (the contract).
                            let raw = unsafe { ld256(codes.add(32 * c)) };
                            let lo = _mm256_and_si256(raw, m4);
                            let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(raw), m4);
                            for j in 0..N {
                                // SAFETY: activation bytes 64q + 4c.. and 64q + 32 + 4c.. of
                                // block b of row j.
                                let (ylo, yhi) = unsafe {
                                    let y = ys[j].add(b * Q8K + 4 + 64 * q + 4 * c);
                                    (
                                        _mm256_set1_epi32(rd::<i32>(y)),
                                        _mm256_set1_epi32(rd::<i32>(y.add(32))),
                                    )
                                };
                                il[j][c % 2] = $add(il[j][c % 2], lo, ylo);
                                ih[j][c % 2] = $add(ih[j][c % 2], hi, yhi);
                            }
                        }
                        // Sub-blocks 2q and 2q + 1: their scales and mins, lane by lane.
                        let (s_lo, s_hi) = (2 * q, 2 * q + 1);
                        let scl = _mm256_shuffle_epi8(sc[s_lo / 4], scale_of[s_lo % 4]);
                        let sch = _mm256_shuffle_epi8(sc[s_hi / 4], scale_of[s_hi % 4]);
                        let mins = _mm256_shuffle_epi8(mn[q / 2], mins_of[q % 2]);
                        for j in 0..N {
                            let (l, h) = ($sum(il[j][0], il[j][1]), $sum(ih[j][0], ih[j][1]));
                            let sj = _mm256_add_epi32($scale(l, scl), $scale(h, sch));
                            let mj = _mm256_madd_epi16(mins, _mm256_set1_epi32(pairs[j][q]));
                            if GEMM {
                                acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sj), dd[j], acc[j]);
                                accm[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(mj), dm[j], accm[j]);
                            } else {
                                s1[j] = _mm256_add_epi32(s1[j], sj);
                                s2[j] = _mm256_add_epi32(s2[j], mj);
                            }
                        }
                    }
                    if !GEMM {
                        for j in 0..N {
                            acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s1[j]), dd[j], acc[j]);
                            accm[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s2[j]), dm[j], accm[j]);
                        }
                    }
                }
                for j in 0..N {
                    // SAFETY: group g's eight outputs of row j (the contract).
                    unsafe {
                        _mm256_storeu_ps(outs[j].add(GROUP * g), _mm256_sub_ps(acc[j], accm[j]))
                    };
                }
            }
        }
    };
}

/// Instantiates a group-loop macro (`k_kernel!` here, `q2k_kernel!` for Q2_K) for both
/// instruction sets, as `groups_avx2` and `groups_vnni`:
/// - AVX2: `maddubs` sums in i16 (exact: at most 8 · 2 · 15 · 128 = 30720 for Q4_K's codes,
///   4 · 2 · 3 · 127 for Q2_K's), the scale applied by `madd` with it in both halves of the lane;
/// - AVX-512 VNNI: `vpdpbusd` sums in i32, the scale applied by `vpmulld`.
macro_rules! both_instruction_sets {
    ($kernel:ident) => {
        $kernel!(
            groups_avx2,
            "avx2,fma,f16c",
            false,
            |s, q, y| _mm256_add_epi16(s, _mm256_maddubs_epi16(q, y)),
            |a, b| _mm256_add_epi16(a, b),
            |s, sc| _mm256_madd_epi16(s, sc)
        );
        $kernel!(
            groups_vnni,
            "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c",
            true,
            |s, q, y| _mm256_dpbusd_epi32(s, q, y),
            |a, b| _mm256_add_epi32(a, b),
            |s, sc| _mm256_mullo_epi32(s, sc)
        );
    };
}
pub(in crate::matmul) use both_instruction_sets;

both_instruction_sets!(k_kernel);

/// Defines `kernel(vnni, rows, gemm)`: the [`GroupFn`] of the `$vnni` or `$avx2` group loop
/// (generic over the row count `N` and `GEMM`) for 1..=4 activation rows, in the GEMM chain or
/// the GEMV one.
macro_rules! kernel_picker {
    ($vnni:ident, $avx2:ident) => {
        /// The kernel for `rows` (1..=4) activation rows in the GEMM chain (`gemm`) or the GEMV
        /// one.
        pub(in crate::matmul) fn kernel(vnni: bool, rows: usize, gemm: bool) -> GroupFn {
            macro_rules! by_rows {
                ($f:ident, $gemm:expr) => {
                    [$f::<1, $gemm> as GroupFn, $f::<2, $gemm>, $f::<3, $gemm>, $f::<4, $gemm>]
                        [rows.clamp(1, 4) - 1]
                };
            }
            match (vnni, gemm) {
                (true, true) => by_rows!($vnni, true),
                (true, false) => by_rows!($vnni, false),
                (false, true) => by_rows!($avx2, true),
                (false, false) => by_rows!($avx2, false),
            }
        }
    };
}
pub(in crate::matmul) use kernel_picker;

kernel_picker!(groups_vnni, groups_avx2);
