//! Products of interleaved Q2_K weights ([`crate::matmul::interleaved`]'s layout: per block of a
//! group, the eight rows' `d`, their `dmin`, their 16 scale bytes as four 4-byte words, then
//! their 64 code bytes as 16 words, word `w` of row `r` at `32 + 32·w + 4·r`) with Q8_K
//! activation rows, in ggml's repacked chains ([`super::repack`]; llama.cpp repacks Q2_K when
//! built with AVX-512): lane `r` of every register is row `r`.
//!
//! A Q2_K block is two halves of 128 values; code byte `l` of half `h` holds the values
//! `128h + 32k + l` (`k` = 0..4) in its bit pairs `2k`, so a code word (four bytes of every
//! row) shifted by `2k` and masked gives four values of one 16-value sub-block
//! (`8h + 2k + (l ≥ 16)`) for all eight rows. Four words make a sub-block's exact sums, then
//! times each row's 4-bit scale (a byte shuffle picks it from the lane's scale word); the
//! mins term is each row's 4-bit mins times the activation's sub-block sums (`madd` with two
//! of them at a time). The GEMV chain takes one pair of FMAs per block, the GEMM chain
//! (llama.cpp's, on activation rows `0..ne11 − ne11 % 4`) one pair per half:
//! `acc = fma(f32(s1), d·dy, acc)`, `accm = fma(f32(s2), dmin·dy, accm)`, output `acc − accm`.
//! The integers are exact in any order, so every output is the one-row chain's bits (tests).

// The AVX-512 intrinsics are stable since Rust 1.89 (the toolchain here is newer); see the
// note in `avx512.rs`.
#![allow(clippy::incompatible_msrv)]

use super::avx2::{ld128, ld256, rd};
use super::interleaved_k::{
    both_instruction_sets, kernel_picker, lane_bytes, GroupFn, WeightGroups,
};
use super::vnni_matvec::PREFETCH;
use crate::matmul::layouts::GROUP;
use std::arch::x86_64::*;

/// Bytes of one Q2_K block of a group's eight rows.
const GROUP_BLOCK: usize = GROUP * 84;
/// Where the code words start in a group's block (after `d`, `dmin` and four scale words).
const CODES: usize = 32 + 4 * 32;
/// Bytes of one Q8_K block (f32 d, qs[256], bsums[16]).
const Q8K: usize = 292;

/// The group loop of one instruction set: `$add(s, codes, y)` adds four products per lane to
/// a sub-block's sums, `$sum` adds two such sums, `$scale(s, scale)` gives them times the
/// lane's scale (`$vnni`: the scale as an i32, else as an i16 pair).
macro_rules! q2k_kernel {
    ($name:ident, $features:literal, $vnni:expr, $add:expr, $sum:expr, $scale:expr) => {
        /// The [`GroupFn`] of one instruction set for `N` activation rows, in the GEMM chain
        /// or the GEMV chain.
        ///
        /// # Safety
        /// The [`GroupFn`] contract, with interleaved Q2_K weights.
        #[target_feature(enable = $features)]
        unsafe fn $name<const N: usize, const GEMM: bool>(
            w: WeightGroups,
            ys: &[*const u8],
            outs: &[*mut f32],
        ) {
            let WeightGroups { x, n, stride: gstride, count: ngroups } = w;
            let ys: [*const u8; N] = std::array::from_fn(|j| ys[j]);
            let (m3, m4) = (_mm256_set1_epi8(3), _mm256_set1_epi8(0x0F));
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
                    for l in 0..GROUP_BLOCK.div_ceil(64) {
                        // A hint only: never faults.
                        _mm_prefetch::<_MM_HINT_T0>(xb.wrapping_add(PREFETCH + 64 * l).cast());
                    }
                    // SAFETY: the group's block b: d, dmin and the four scale words.
                    let (d, dmin, words) = unsafe {
                        (
                            _mm256_cvtph_ps(ld128(xb)),
                            _mm256_cvtph_ps(ld128(xb.add(16))),
                            [
                                ld256(xb.add(32)),
                                ld256(xb.add(64)),
                                ld256(xb.add(96)),
                                ld256(xb.add(128)),
                            ],
                        )
                    };
                    let sc = words.map(|u| _mm256_and_si256(u, m4));
                    let mn = words.map(|u| _mm256_and_si256(_mm256_srli_epi16::<4>(u), m4));
                    let mut dd = [_mm256_setzero_ps(); N];
                    let mut dm = [_mm256_setzero_ps(); N];
                    for j in 0..N {
                        // SAFETY: block b's scale of activation row j.
                        let dy = _mm256_set1_ps(unsafe { rd::<f32>(ys[j].add(b * Q8K)) });
                        (dd[j], dm[j]) = (_mm256_mul_ps(d, dy), _mm256_mul_ps(dmin, dy));
                    }
                    let mut s1 = [_mm256_setzero_si256(); N];
                    let mut s2 = [_mm256_setzero_si256(); N];
                    for h in 0..2 {
                        for k in 0..4 {
                            let shift = _mm_cvtsi32_si128(2 * k as i32);
                            for part in 0..2 {
                                // Two independent sums per sub-block and row (even and odd
                                // words), so the multiply-adds do not wait on each other.
                                let mut ss = [[_mm256_setzero_si256(); 2]; N];
                                for c4 in 0..4 {
                                    let c = 8 * h + 4 * part + c4;
                                    // SAFETY: code word c of the group's block (the contract).
                                    let raw = unsafe { ld256(xb.add(CODES + 32 * c)) };
                                    let q = _mm256_and_si256(_mm256_srl_epi16(raw, shift), m3);
                                    for j in 0..N {
                                        // SAFETY: activation bytes 128h + 32k + 16·part + 4·c4
                                        // .. + 4 of block b of row j.
                                        let y = unsafe {
                                            let off = 128 * h + 32 * k + 16 * part + 4 * c4;
                                            rd::<i32>(ys[j].add(b * Q8K + 4 + off))
                                        };
                                        let y = _mm256_set1_epi32(y);
                                        ss[j][c4 % 2] = $add(ss[j][c4 % 2], q, y);
                                    }
                                }
                                let sub = 8 * h + 2 * k + part;
                                let scale = _mm256_shuffle_epi8(sc[sub / 4], scale_of[sub % 4]);
                                for j in 0..N {
                                    let p = $scale($sum(ss[j][0], ss[j][1]), scale);
                                    s1[j] = _mm256_add_epi32(s1[j], p);
                                }
                            }
                        }
                        // The half's mins: sub-blocks 8h..8h + 8, words 2h and 2h + 1.
                        for j in 0..N {
                            for w in [2 * h, 2 * h + 1] {
                                for (p, sel) in mins_of.iter().enumerate() {
                                    // SAFETY: block sums 4w + 2p and 4w + 2p + 1 of block b of
                                    // activation row j (i16 each, at 260).
                                    let pair = unsafe {
                                        rd::<i32>(ys[j].add(b * Q8K + 260 + 8 * w + 4 * p))
                                    };
                                    let m = _mm256_shuffle_epi8(mn[w], *sel);
                                    let t = _mm256_madd_epi16(m, _mm256_set1_epi32(pair));
                                    s2[j] = _mm256_add_epi32(s2[j], t);
                                }
                            }
                        }
                        if GEMM {
                            for j in 0..N {
                                acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s1[j]), dd[j], acc[j]);
                                accm[j] =
                                    _mm256_fmadd_ps(_mm256_cvtepi32_ps(s2[j]), dm[j], accm[j]);
                                (s1[j], s2[j]) = (_mm256_setzero_si256(), _mm256_setzero_si256());
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

both_instruction_sets!(q2k_kernel);

kernel_picker!(groups_vnni, groups_avx2);
