//! The x86 group kernels of interleaved weights ([`crate::matmul::interleaved`], whose docs give
//! the layout and the arithmetic): the Q8_0 family's (Q4_0, IQ4_NL, MXFP4) with AVX2 or
//! AVX-512 VNNI here, Q4_K's in [`super::interleaved_k`], Q2_K's in [`super::interleaved_q2k`].

// The AVX-512 intrinsics are stable since Rust 1.89 (the toolchain here is newer); see the
// note in `avx512.rs`.
#![allow(clippy::incompatible_msrv)]

use super::avx2::{dot_u8_i8, hsum_epi32, iq4_nl_table, ld128, ld256, mxfp4_table, rd};
use super::interleaved_k::{self, WeightGroups};
use super::vnni_matvec::PREFETCH;
#[cfg(doc)]
use crate::matmul::layouts::MAX_ROWS;
use crate::matmul::layouts::{GROUP, MXFP4_BYTES, QK_BYTES};
use std::arch::x86_64::*;

/// `N` activation rows (Q8_0, `n` values each, at `ys`; `bias[j]` what each of their blocks'
/// sums must lose: `8·Σy` for Q4_0, `128·Σy` for IQ4_NL with VNNI, unused otherwise) against
/// the weight groups `w` (eight interleaved rows each): `outs[j]` gets the group's eight
/// outputs per group, consecutive.
///
/// # Safety
/// The weight groups, activation rows and `bias` readable as said, `outs[j]` writable for
/// `8 · w.count` f32; the CPU has the function's features (AVX-512 VNNI and VL for the VNNI
/// ones).
pub(in crate::matmul) type GroupFn =
    unsafe fn(w: WeightGroups, ys: &[*const u8], bias: &[*const i32], outs: &[*mut f32]);

/// The group loop of one type and instruction set: `$block` bytes per group block, its scales
/// first (`$head` bytes, which `$scales(block)` turns into the eight rows' f32 scales), then
/// the words of nibbles; `$weights(nibbles)` turns 32 bytes of nibbles (`0..16`) into the
/// operand of `$dot`; `$dot(s, w, y)` adds the products of four weight values and four
/// activation bytes per lane to `s`; `$add` adds two such sums; `$finish(s)` turns the
/// accumulated `s` into eight i32 sums; `$biased`: whether each block's sums lose their `bias`.
macro_rules! group_kernel {
    ($name:ident, $features:literal, ($block:expr, $head:expr, $scales:expr), $weights:expr,
     $dot:expr, $add:expr, $finish:expr, $biased:literal) => {
        /// The [`GroupFn`] of one type and instruction set for `N` activation rows.
        ///
        /// # Safety
        /// The [`GroupFn`] contract.
        #[target_feature(enable = $features)]
        unsafe fn $name<const N: usize>(
            w: WeightGroups,
            ys: &[*const u8],
            bias: &[*const i32],
            outs: &[*mut f32],
        ) {
            let WeightGroups { x, n, stride: gstride, count: ngroups } = w;
            let ys: [*const u8; N] = std::array::from_fn(|j| ys[j]);
            let bias: [*const i32; N] = std::array::from_fn(|j| bias[j]);
            let m4 = _mm256_set1_epi8(0x0F);
            for g in 0..ngroups {
                let gx = x.wrapping_add(g * gstride);
                let mut acc = [_mm256_setzero_ps(); N];
                for i in 0..n / 32 {
                    let b = gx.wrapping_add(i * $block);
                    // Hints only: never fault. Two lines per 144-byte block cover the stream.
                    _mm_prefetch::<_MM_HINT_T0>(b.wrapping_add(PREFETCH).cast());
                    _mm_prefetch::<_MM_HINT_T0>(b.wrapping_add(PREFETCH + 64).cast());
                    // Four independent sums per row (low/high nibbles, even/odd chunks), so
                    // the multiply-adds do not wait on each other; exact in any order.
                    let mut s = [[_mm256_setzero_si256(); 4]; N];
                    for c in 0..4 {
                        // SAFETY: chunk c of block i of the group (the contract).
                        let raw = unsafe { ld256(b.add($head + 32 * c)) };
                        let lo = $weights(_mm256_and_si256(raw, m4));
                        let hi = $weights(_mm256_and_si256(_mm256_srli_epi16::<4>(raw), m4));
                        for j in 0..N {
                            // SAFETY: bytes 4c.. and 16+4c.. of block i of activation row j.
                            let (ylo, yhi) = unsafe {
                                let yb = ys[j].add(34 * i + 2 + 4 * c);
                                (
                                    _mm256_set1_epi32(rd::<i32>(yb)),
                                    _mm256_set1_epi32(rd::<i32>(yb.add(16))),
                                )
                            };
                            s[j][c % 2] = $dot(s[j][c % 2], lo, ylo);
                            s[j][2 + c % 2] = $dot(s[j][2 + c % 2], hi, yhi);
                        }
                    }
                    // SAFETY: the eight rows' scales at the block's start.
                    let dx = unsafe { $scales(b) };
                    for j in 0..N {
                        // SAFETY: block i's scale of row j (the contract).
                        let dy = unsafe { rd::<u16>(ys[j].add(34 * i)) };
                        let [a, b, c, d] = s[j];
                        let mut sums = $finish($add($add(a, b), $add(c, d)));
                        if $biased {
                            // SAFETY: block i's bias of row j (the contract).
                            let by = unsafe { *bias[j].add(i) };
                            sums = _mm256_sub_epi32(sums, _mm256_set1_epi32(by));
                        }
                        let dy = _mm256_cvtph_ps(_mm_set1_epi16(dy as i16));
                        acc[j] = _mm256_fmadd_ps(
                            _mm256_cvtepi32_ps(sums),
                            _mm256_mul_ps(dx, dy),
                            acc[j],
                        );
                    }
                }
                for j in 0..N {
                    // SAFETY: group g's eight outputs of row j (the contract).
                    unsafe { _mm256_storeu_ps(outs[j].add(GROUP * g), acc[j]) };
                }
            }
        }
    };
}

/// The eight rows' f16 scales at the start of a Q4_0 or IQ4_NL group block.
///
/// # Safety
/// 16 readable bytes at `b`; F16C.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn f16_scales(b: *const u8) -> __m256 {
    // SAFETY: by the caller's contract.
    _mm256_cvtph_ps(unsafe { ld128(b) })
}

/// The eight rows' scales at the start of an MXFP4 group block: each E8M0 exponent `e` as half
/// its power of two, `2^(e − 128)` (`ggml_e8m0_to_fp32_half`, subnormal for `e < 2`).
///
/// # Safety
/// 8 readable bytes at `b`; AVX2.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn e8m0_scales(b: *const u8) -> __m256 {
    // SAFETY: by the caller's contract.
    let e = _mm256_cvtepu8_epi32(unsafe { _mm_loadl_epi64(b.cast()) });
    let normal = _mm256_slli_epi32::<23>(_mm256_sub_epi32(e, _mm256_set1_epi32(1)));
    let small = _mm256_sllv_epi32(_mm256_set1_epi32(0x0020_0000), e);
    let is_small = _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e);
    _mm256_castsi256_ps(_mm256_blendv_epi8(normal, small, is_small))
}

// Q4_0, AVX2: `maddubs` pairs in i16, the eight of a block summed in i16 (at most
// 8 · 2 · 15 · 128 = 30720, exact), then one `madd` to i32 per block.
group_kernel!(
    q4_0_avx2,
    "avx2,fma,f16c",
    (GROUP * QK_BYTES, 16, f16_scales),
    |q| q,
    |s, q, y| _mm256_add_epi16(s, _mm256_maddubs_epi16(q, y)),
    |a, b| _mm256_add_epi16(a, b),
    |s| _mm256_madd_epi16(s, _mm256_set1_epi16(1)),
    true
);
// Q4_0, AVX-512 VNNI (256-bit registers): `vpdpbusd` adds four products per lane in i32.
group_kernel!(
    q4_0_vnni,
    "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c",
    (GROUP * QK_BYTES, 16, f16_scales),
    |q| q,
    |s, q, y| _mm256_dpbusd_epi32(s, q, y),
    |a, b| _mm256_add_epi32(a, b),
    |s| s,
    true
);
/// The two group kernels of a type whose nibbles index a table of signed values (`$table()`,
/// its 16 bytes in both lanes), laid out as `$layout` (see `group_kernel!`):
/// - `$avx2`: the signed table values; `|q|` times `y` with `q`'s signs (a pair at most
///   2 · 127 · 128 = 32512, exact in `maddubs`), each product's pairs to i32 at once;
/// - `$vnni`: AVX-512 VNNI, the table plus 128 (unsigned) through `vpdpbusd`, `128·Σy` taken
///   off.
macro_rules! table_kernels {
    ($avx2:ident, $vnni:ident, $layout:tt, $table:path) => {
        group_kernel!(
            $avx2,
            "avx2,fma,f16c",
            $layout,
            |q| _mm256_shuffle_epi8($table(), q),
            |s, q, y| {
                let p = _mm256_maddubs_epi16(_mm256_sign_epi8(q, q), _mm256_sign_epi8(y, q));
                _mm256_add_epi32(s, _mm256_madd_epi16(p, _mm256_set1_epi16(1)))
            },
            |a, b| _mm256_add_epi32(a, b),
            |s| s,
            false
        );
        group_kernel!(
            $vnni,
            "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c",
            $layout,
            |q| _mm256_shuffle_epi8(_mm256_xor_si256($table(), _mm256_set1_epi8(0x80u8 as i8)), q),
            |s, q, y| _mm256_dpbusd_epi32(s, q, y),
            |a, b| _mm256_add_epi32(a, b),
            |s| s,
            true
        );
    };
}

// IQ4_NL: `kvalues_iq4nl`, f16 scales.
table_kernels!(iq4_nl_avx2, iq4_nl_vnni, (GROUP * QK_BYTES, 16, f16_scales), iq4_nl_table);
// MXFP4: `kvalues_mxfp4` (values within ±12), E8M0 scales.
table_kernels!(mxfp4_avx2, mxfp4_vnni, (GROUP * MXFP4_BYTES, 8, e8m0_scales), mxfp4_table);

/// The group kernel of one Q8_0-family type for 1..=[`MAX_ROWS`] activation rows, with
/// AVX-512 VNNI (`vnni`) or AVX2.
macro_rules! group_picker {
    ($($name:ident = $avx2:ident, $vnni:ident;)*) => {$(
        #[doc = concat!("[`", stringify!($avx2), "`] or [`", stringify!($vnni), "`] for `rows` rows.")]
        pub(in crate::matmul) fn $name(vnni: bool, rows: usize) -> GroupFn {
            let pick: [[GroupFn; 4]; 2] = [
                [$avx2::<1>, $avx2::<2>, $avx2::<3>, $avx2::<4>],
                [$vnni::<1>, $vnni::<2>, $vnni::<3>, $vnni::<4>],
            ];
            pick[usize::from(vnni)][rows.clamp(1, 4) - 1]
        }
    )*};
}

group_picker! {
    q4_0_group = q4_0_avx2, q4_0_vnni;
    iq4_nl_group = iq4_nl_avx2, iq4_nl_vnni;
    mxfp4_group = mxfp4_avx2, mxfp4_vnni;
}

/// The group kernels of a repacked type (the type table names them).
#[derive(Clone, Copy)]
pub(in crate::matmul) enum Groups {
    /// The Q8_0 family: `pick(vnni, rows)`, each activation block's sums losing
    /// `bias[vnni]·Σy` (`None`: unbiased), which [`block_sums`] computes.
    Biased {
        /// The kernel by instruction set and row count.
        pick: fn(bool, usize) -> GroupFn,
        /// The bias with AVX2 and with VNNI.
        bias: [Option<u8>; 2],
    },
    /// The K-quants' repacked chains: `kernel(vnni, rows, gemm)`.
    Chains(fn(bool, usize, bool) -> interleaved_k::GroupFn),
}

impl Groups {
    /// What each activation block's sums lose with these kernels (`vnni` as the kernels').
    pub(in crate::matmul) fn bias(self, vnni: bool) -> Option<u8> {
        match self {
            Groups::Biased { bias, .. } => bias[usize::from(vnni)],
            Groups::Chains(_) => None,
        }
    }
}

/// `m·Σy` of each block of a Q8_0 row of `n` values (`m` at most 128).
///
/// # Safety
/// `y` a readable Q8_0 row of `n` values; AVX2.
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::matmul) unsafe fn block_sums(n: usize, y: *const u8, m: u8, out: &mut Vec<i32>) {
    // `maddubs` pairs: at most 2 · 128 · 128 = 32768 in magnitude only for y = −128, which
    // Q8_0 never holds (its values are within ±127).
    let m = _mm256_set1_epi8(m as i8);
    // SAFETY: block i's 32 bytes of values (the contract).
    out.extend((0..n / 32).map(|i| hsum_epi32(dot_u8_i8(m, unsafe { ld256(y.add(34 * i + 2)) }))));
}

/// One tile of up to [`MAX_ROWS`] activation rows `ys` against the weight groups `w` (eight
/// interleaved rows each): the Q8_0 family's group kernel (with the rows' block bias `sy`),
/// else the K-quants' chain (`gemm`: Q4_K's GEMM chain, else the GEMV chain); row `j`'s
/// outputs start at `outs[j]`.
///
/// # Safety
/// The group kernels' contract: readable weight groups and converted activation rows of the
/// weight's dot type (and their block sums for the Q8_0 family), writable outputs for every
/// group, a CPU with the kernel's instruction set (`vnni`: AVX-512 VNNI, else AVX2).
pub(in crate::matmul) unsafe fn run_tile(
    groups: Groups,
    vnni: bool,
    gemm: bool,
    w: WeightGroups,
    ys: &[*const u8],
    sy: &[*const i32],
    outs: &[*mut f32],
) {
    let rows = ys.len();
    // SAFETY: forwarded from the caller.
    unsafe {
        match groups {
            Groups::Biased { pick, .. } => pick(vnni, rows)(w, ys, sy, outs),
            Groups::Chains(kernel) => kernel(vnni, rows, gemm)(w, ys, outs),
        }
    }
}
