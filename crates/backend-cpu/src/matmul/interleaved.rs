//! Repacked Q4_0, IQ4_NL, MXFP4, Q4_K and Q2_K weights with eight rows interleaved in memory,
//! as llama.cpp's CPU_REPACK buffer holds them (`block_q4_0x8`, `block_iq4_nlx8`,
//! `block_mxfp4x8`, `block_q4_Kx8`, `block_q2_Kx8`; the layout here is Tessera's own), and their
//! products (Q4_0, IQ4_NL and MXFP4 here, Q4_K in [`super::interleaved_k`], Q2_K in
//! [`super::interleaved_q2k`]).
//!
//! # Why a layout of its own
//!
//! The repacked chain ([`super::repack`]) needs, per weight row and block, the exact integer
//! `Σ q·y` of its products. Read from the file's layout, eight rows make eight memory streams
//! and each row's sum ends in a horizontal reduction. Interleaved, a group of eight rows is
//! one stream, and each 32-bit lane of a register holds four bytes of one row: one
//! multiply-add with four activation bytes broadcast to every lane adds to all eight rows'
//! sums at once, lane `r` ending with row `r`'s exact sum. No horizontal sums, no shuffles;
//! the output is lane `r`'s f32 chain (Q4_0: `acc = fma(f32(Σ q·y), f32(dx)·f32(dy), acc)`
//! over the blocks in order; IQ4_NL and MXFP4 the same), which is the repacked chain exactly (same bits as
//! [`super::repack`]'s one-row kernels, tests).
//!
//! # The layout
//!
//! Rows `8g..8g+8` keep the bytes they had (`8 · row_size` from `8g · row_size`), so a range
//! of whole groups is a range of bytes. Within a group, block `i` of the eight rows takes the
//! eight rows' bytes of that block (`8 · block size` at `8 · block size · i`): first each
//! scale field as eight consecutive values in row order (Q4_0: `d`; Q4_K and Q2_K: `d`, then
//! `dmin`, which Q2_K's file block keeps at its end; MXFP4: its one-byte exponent `e`), then
//! the rest of each row's block as 4-byte words, word `w` of row `r` at
//! `8·field bytes + 32·w + 4·r`: 32 bytes per word index, one lane per row.
//!
//! For Q4_0, IQ4_NL and MXFP4 the four words are their 16 bytes of nibbles: a byte's low nibble is
//! value `j`, its high nibble value `j + 16`, so word `c` gives the values `4c..4c+4` (low
//! nibbles) and `16+4c..16+4c+4` (high) of every row. Q4_0's products take the nibbles
//! unsigned (`0..16`) and take `8·Σy` off each block's sums (the activation block's sum, found
//! once per product). IQ4_NL's nibbles index `kvalues_iq4nl` (one byte shuffle): with VNNI the
//! table biased to unsigned (`+128`), `128·Σy` taken off the same way; with AVX2 the signed
//! values through the sign trick (`|q|` times `y` with `q`'s signs: pair sums fit `maddubs`),
//! summed in i32. MXFP4 is IQ4_NL with its own table (`kvalues_mxfp4`) and its scales the eight
//! rows' E8M0 exponents, each as half its power of two.

// The AVX-512 intrinsics are stable since Rust 1.89 (the toolchain here is newer); see the
// note in `avx512.rs`.
#![allow(clippy::incompatible_msrv)]

use super::avx2::{dot_u8_i8, hsum_epi32, iq4_nl_table, ld128, ld256, mxfp4_table, rd};
use super::vnni_matvec::PREFETCH;
use super::{interleaved_k, interleaved_q2k, row_targets, Activations};
use crate::{ComputeParams, TensorRef};
use std::arch::x86_64::*;
use std::cell::RefCell;
use tessera_tensor::DType;

/// Rows per interleaved group.
pub(crate) const GROUP: usize = 8;
/// Bytes of one Q4_0 (and IQ4_NL) block.
const QK_BYTES: usize = 18;
/// Bytes of one MXFP4 block.
const MXFP4_BYTES: usize = 17;
/// Most activation rows one kernel call takes.
pub(super) const MAX_ROWS: usize = 4;

/// How a type's blocks are interleaved: its `head` scale fields of `field` bytes each (at byte
/// `at` of the file's block) first, each as the eight rows' values in row order, then the rest
/// of each row's block, in order, as 4-byte words, word `w` of row `r` at
/// `8·field·head + 32·w + 4·r`.
#[derive(Clone, Copy)]
struct Shape {
    /// Bytes per block.
    bytes: usize,
    /// Values per block.
    values: usize,
    /// The scale fields.
    head: usize,
    /// Bytes per scale field (2: f16; 1: MXFP4's E8M0 exponent).
    field: usize,
    /// Where they are in the file's block (Q2_K keeps `d` and `dmin` at its end).
    at: usize,
}

impl Shape {
    /// Bytes of the scale fields of one row's block.
    fn head_bytes(self) -> usize {
        self.head * self.field
    }
}

/// The interleaved shape of `dtype`, where its repacked weights are stored interleaved.
fn shape(dtype: DType) -> Option<Shape> {
    let sh = |bytes, values, head, field, at| Some(Shape { bytes, values, head, field, at });
    match dtype {
        DType::Q4_0 | DType::IQ4_NL => sh(QK_BYTES, 32, 1, 2, 0),
        DType::MXFP4 => sh(MXFP4_BYTES, 32, 1, 1, 0),
        DType::Q4_K => sh(144, 256, 2, 2, 0),
        DType::Q2_K => sh(84, 256, 2, 2, 80),
        _ => None,
    }
}

/// Whether the repacked weights of `dtype` are stored interleaved ([`interleave`]) rather
/// than in the file's layout.
pub(crate) fn applies(dtype: DType) -> bool {
    shape(dtype).is_some()
}

/// Where byte `i` of row `r`'s block goes in the group's interleaved block.
fn place(sh: Shape, r: usize, i: usize) -> usize {
    let fields = sh.at..sh.at + sh.head_bytes();
    if fields.contains(&i) {
        let f = i - sh.at;
        GROUP * sh.field * (f / sh.field) + sh.field * r + f % sh.field
    } else {
        // The byte's place among the bytes that are not fields.
        let j = if i < sh.at { i } else { i - sh.head_bytes() };
        GROUP * sh.head_bytes() + 32 * (j / 4) + 4 * r + j % 4
    }
}

/// Moves every byte of `rows` rows of `k` values between the file's layout (`plain`) and the
/// interleaved one: `f(plain index, interleaved index, length)` for each run of bytes that
/// stays together (a scale field, a 4-byte word).
fn for_each_run(sh: Shape, rows: usize, k: usize, mut f: impl FnMut(usize, usize, usize)) {
    let nb = k / sh.values;
    let row = nb * sh.bytes;
    let fields_end = sh.at + sh.head_bytes();
    for g in 0..rows / GROUP {
        let base = g * GROUP * row;
        for b in 0..nb {
            let gb = base + b * GROUP * sh.bytes;
            for r in 0..GROUP {
                let pb = base + r * row + b * sh.bytes;
                for i in (sh.at..fields_end).step_by(sh.field) {
                    f(pb + i, gb + place(sh, r, i), sh.field);
                }
                for i in (0..sh.at).step_by(4).chain((fields_end..sh.bytes).step_by(4)) {
                    f(pb + i, gb + place(sh, r, i), 4);
                }
            }
        }
    }
}

/// The shape, when `len` bytes are `rows` whole rows of `k` values of `dtype` in groups of
/// eight.
fn checked(dtype: DType, len: usize, rows: usize, k: usize) -> Option<Shape> {
    let sh = shape(dtype)?;
    let whole = rows % GROUP == 0 && k % sh.values == 0;
    let words = sh.at % 4 == 0 && (sh.bytes - sh.head_bytes()) % 4 == 0;
    (whole && words && len == rows * (k / sh.values) * sh.bytes).then_some(sh)
}

/// The interleaved layout (module docs) of `rows` rows of `k` values of `dtype`, given in
/// the file's layout. `None` for a type not stored interleaved, unless `rows` is a multiple
/// of 8, `k` of the block size and `src` exactly that many rows.
pub(crate) fn interleave(dtype: DType, src: &[u8], rows: usize, k: usize) -> Option<Vec<u8>> {
    let sh = checked(dtype, src.len(), rows, k)?;
    let mut out = vec![0u8; src.len()];
    for_each_run(sh, rows, k, |p, i, n| out[i..i + n].copy_from_slice(&src[p..p + n]));
    Some(out)
}

/// The file's layout back from [`interleave`]'s (same conditions).
pub(crate) fn deinterleave(dtype: DType, src: &[u8], rows: usize, k: usize) -> Option<Vec<u8>> {
    let sh = checked(dtype, src.len(), rows, k)?;
    let mut out = vec![0u8; src.len()];
    for_each_run(sh, rows, k, |p, i, n| out[p..p + n].copy_from_slice(&src[i..i + n]));
    Some(out)
}

/// `N` activation rows (Q8_0, `n` values each, at `ys`; `bias[j]` what each of their blocks'
/// sums must lose: `8·Σy` for Q4_0, `128·Σy` for IQ4_NL with VNNI, unused otherwise) against
/// the groups of eight interleaved weight rows at `x` (`ngroups` of them, `gstride` bytes
/// apart): `outs[j]` gets the group's eight outputs per group, consecutive.
///
/// # Safety
/// The weight groups, activation rows and `bias` readable as said, `outs[j]` writable for
/// `8 · ngroups` f32; the CPU has the function's features (AVX-512 VNNI and VL for the VNNI
/// ones).
type GroupFn = unsafe fn(
    n: usize,
    x: *const u8,
    gstride: usize,
    ngroups: usize,
    ys: &[*const u8],
    bias: &[*const i32],
    outs: &[*mut f32],
);

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
            n: usize,
            x: *const u8,
            gstride: usize,
            ngroups: usize,
            ys: &[*const u8],
            bias: &[*const i32],
            outs: &[*mut f32],
        ) {
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

/// The group kernel of `dtype` (Q4_0, IQ4_NL or MXFP4) for `rows` (1..=[`MAX_ROWS`])
/// activation rows.
fn kernel(dtype: DType, vnni: bool, rows: usize) -> GroupFn {
    macro_rules! pick {
        ($f:ident) => {
            match rows {
                1 => $f::<1> as GroupFn,
                2 => $f::<2>,
                3 => $f::<3>,
                _ => $f::<4>,
            }
        };
    }
    match (dtype, vnni) {
        (DType::IQ4_NL, true) => pick!(iq4_nl_vnni),
        (DType::IQ4_NL, false) => pick!(iq4_nl_avx2),
        (DType::MXFP4, true) => pick!(mxfp4_vnni),
        (DType::MXFP4, false) => pick!(mxfp4_avx2),
        (_, true) => pick!(q4_0_vnni),
        (_, false) => pick!(q4_0_avx2),
    }
}

/// `m·Σy` of each block of a Q8_0 row of `n` values (`m` at most 128).
///
/// # Safety
/// `y` a readable Q8_0 row of `n` values; AVX2.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn block_sums(n: usize, y: *const u8, m: u8, out: &mut Vec<i32>) {
    // `maddubs` pairs: at most 2 · 128 · 128 = 32768 in magnitude only for y = −128, which
    // Q8_0 never holds (its values are within ±127).
    let m = _mm256_set1_epi8(m as i8);
    // SAFETY: block i's 32 bytes of values (the contract).
    out.extend((0..n / 32).map(|i| hsum_epi32(dot_u8_i8(m, unsafe { ld256(y.add(34 * i + 2)) }))));
}

/// What each activation block's sums lose for `dtype`'s group kernel (`group_kernel`'s
/// `$biased`): the Q8_0 family's bias, which [`block_sums`] computes.
fn block_bias(dtype: DType, vnni: bool) -> Option<u8> {
    match dtype {
        DType::Q4_0 => Some(8),
        DType::IQ4_NL | DType::MXFP4 if vnni => Some(128),
        _ => None,
    }
}

/// One tile of up to [`MAX_ROWS`] activation rows `ys` against `ngroups` groups of eight
/// interleaved weight rows at `x` (`gstride` bytes apart, rows of `k` values): the Q8_0
/// family's group kernel (with the rows' block bias `sy`), else the K-quants' chain (`gemm`:
/// Q4_K's GEMM chain, else the GEMV chain); row `j`'s outputs start at `outs[j]`.
///
/// # Safety
/// The group kernels' contract: readable weight groups and converted activation rows of the
/// weight's dot type (and their block sums for the Q8_0 family), writable outputs for every
/// group, a CPU with the kernel's instruction set (`vnni`: AVX-512 VNNI, else AVX2).
unsafe fn run_tile(
    dtype: DType,
    vnni: bool,
    gemm: bool,
    (k, x, gstride, ngroups): (usize, *const u8, usize, usize),
    ys: &[*const u8],
    sy: &[*const i32],
    outs: &[*mut f32],
) {
    let rows = ys.len();
    // SAFETY: forwarded from the caller.
    unsafe {
        if matches!(dtype, DType::Q4_0 | DType::IQ4_NL | DType::MXFP4) {
            kernel(dtype, vnni, rows)(k, x, gstride, ngroups, ys, sy, outs)
        } else {
            let kernel =
                if dtype == DType::Q2_K { interleaved_q2k::kernel } else { interleaved_k::kernel };
            kernel(vnni, rows, gemm)(k, x, gstride, ngroups, ys, outs)
        }
    }
}

/// Computes this thread's share of `dst = src0 · src1ᵀ` for interleaved weights (2-D, rows
/// a multiple of 8): contiguous ranges of groups per thread; each range in pieces of four
/// groups that every tile of up to four activation rows reads while they are in cache.
/// Q4_K's activation rows `0..ne11 − ne11 % 4` take the GEMM chain, the rest the GEMV chain
/// (llama.cpp's split); Q4_0's and IQ4_NL's two chains are one.
/// `vnni`: the CPU has AVX-512 VNNI and the level allows it (else AVX2).
pub(super) fn mul_mat(
    p: &ComputeParams,
    dst: &TensorRef,
    src0: &TensorRef,
    act: &Activations,
    vnni: bool,
) {
    thread_local! {
        /// Per-thread bias of every activation row's blocks (Q4_0, IQ4_NL with VNNI).
        static SUMS: RefCell<Vec<i32>> = const { RefCell::new(Vec::new()) };
    }
    let (k, nr0) = (src0.ne[0], src0.ne[1]);
    assert!(nr0 % GROUP == 0, "interleaved weights: {nr0} rows, not groups of eight");
    let gstride = GROUP * src0.nb[1];
    let groups = nr0 / GROUP;
    let share = |i: usize| groups * i / p.nth;
    let mine = share(p.ith)..share(p.ith + 1);
    if mine.is_empty() {
        return;
    }
    let src1 = &act.src1;
    let n1 = src1.n_rows();
    // Tiles of activation rows, `tile(t) = (first row, rows, GEMM chain)`: in one plane, the
    // rows 0..full (llama.cpp's GEMM rows, a multiple of four) in fours, then the rest; over
    // several planes one row at a time, its chain by its row in the plane.
    // In batch-invariant mode every row takes the GEMV chain, the one a row alone takes.
    let ne11 = src1.ne[1];
    let full = if p.batch_invariant { 0 } else { ne11 - ne11 % 4 };
    let one_plane = src1.ne[2] * src1.ne[3] == 1;
    let ntiles = if one_plane { full / MAX_ROWS + (n1 - full).div_ceil(MAX_ROWS) } else { n1 };
    let tile = |t: usize| {
        if !one_plane {
            (t, 1, src1.row_coords(t).0 < full)
        } else if t < full / MAX_ROWS {
            (MAX_ROWS * t, MAX_ROWS, true)
        } else {
            let r0 = full + MAX_ROWS * (t - full / MAX_ROWS);
            (r0, MAX_ROWS.min(n1 - r0), false)
        }
    };
    let dtype = src0.dtype;
    let bias = block_bias(dtype, vnni);
    SUMS.with(|cell| {
        let mut sums = cell.borrow_mut();
        sums.clear();
        if let Some(m) = bias {
            for r in 0..n1 {
                // SAFETY: the converted Q8_0 activation row r of k values; AVX2 (the caller).
                unsafe { block_sums(k, act.row(r), m, &mut sums) };
            }
        }
        let piece = if n1 <= MAX_ROWS { mine.len() } else { 4 };
        for g0 in mine.clone().step_by(piece) {
            let g1 = (g0 + piece).min(mine.end);
            // The weight is 2-D (`repack::applies`): every activation row reads the same one.
            let x = src0.data.cast_const().wrapping_add(g0 * gstride);
            for (r0, rows, gemm) in (0..ntiles).map(tile) {
                let mut ys = [std::ptr::null(); MAX_ROWS];
                let mut sy = [std::ptr::null(); MAX_ROWS];
                let mut outs = [std::ptr::null_mut(); MAX_ROWS];
                for j in 0..rows {
                    ys[j] = act.row(r0 + j);
                    if bias.is_some() {
                        sy[j] = sums[(r0 + j) * (k / 32)..].as_ptr();
                    }
                    outs[j] = row_targets(dst, src0, src1, r0 + j).1.wrapping_add(GROUP * g0);
                }
                let (ys, outs) = (&ys[..rows], &outs[..rows]);
                // SAFETY: groups g0..g1 of the 2-D interleaved weight (k values per row);
                // converted activation rows r0.. of the weight's dot type (and their block
                // bias); dst rows r0.. hold nr0 values and this thread owns the columns of its
                // groups; the caller checked the CPU.
                unsafe {
                    run_tile(dtype, vnni, gemm, (k, x, gstride, g1 - g0), ys, &sy[..rows], outs)
                };
            }
        }
    });
}

/// This thread's share of one 2-D interleaved matrix (rows a multiple of 8) against gathered
/// activation rows: `pairs[i] = (converted activation row, its output row)`, every pair on the
/// GEMV chain. llama.cpp's repacked MUL_MAT_ID multiplies each row alone by that chain, whose
/// results do not depend on the rows beside it, so here they go in fours. Contiguous ranges
/// of groups per thread, as [`mul_mat`]. `vnni` as for [`mul_mat`].
pub(super) fn gemv_gathered(
    p: &ComputeParams,
    src0: &TensorRef,
    pairs: &[(*const u8, *mut f32)],
    vnni: bool,
) {
    let (k, nr0) = (src0.ne[0], src0.ne[1]);
    assert!(nr0 % GROUP == 0, "interleaved weights: {nr0} rows, not groups of eight");
    let gstride = GROUP * src0.nb[1];
    let groups = nr0 / GROUP;
    let share = |i: usize| groups * i / p.nth;
    let mine = share(p.ith)..share(p.ith + 1);
    if mine.is_empty() {
        return;
    }
    let dtype = src0.dtype;
    let bias = block_bias(dtype, vnni);
    let x = src0.data.cast_const().wrapping_add(mine.start * gstride);
    let mut sums = Vec::new();
    for tile in pairs.chunks(MAX_ROWS) {
        let rows = tile.len();
        let mut ys = [std::ptr::null(); MAX_ROWS];
        let mut sy = [std::ptr::null(); MAX_ROWS];
        let mut outs = [std::ptr::null_mut(); MAX_ROWS];
        sums.clear();
        if let Some(m) = bias {
            for &(y, _) in tile {
                // SAFETY: a converted Q8_0 activation row of k values; AVX2 (the caller).
                unsafe { block_sums(k, y, m, &mut sums) };
            }
        }
        for (j, &(y, out)) in tile.iter().enumerate() {
            ys[j] = y;
            if bias.is_some() {
                sy[j] = sums[j * (k / 32)..].as_ptr();
            }
            outs[j] = out.wrapping_add(GROUP * mine.start);
        }
        let (ys, outs) = (&ys[..rows], &outs[..rows]);
        // SAFETY: this thread's groups of the 2-D interleaved weight (k values per row);
        // converted activation rows of its dot type (and their block bias); each output row
        // holds nr0 values and this thread owns the columns of its groups; the caller checked
        // the CPU.
        unsafe { run_tile(dtype, vnni, false, (k, x, gstride, mine.len()), ys, &sy[..rows], outs) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interleave_round_trips_and_places_bytes() {
        let (rows, k) = (16, 64);
        let src: Vec<u8> = (0..rows * k / 32 * QK_BYTES).map(|i| (i * 7 % 251) as u8).collect();
        let il = interleave(DType::Q4_0, &src, rows, k).unwrap();
        assert_eq!(deinterleave(DType::Q4_0, &il, rows, k).unwrap(), src);
        // Group 1, block 1, row 3: its scale, and its nibble bytes 4..8 in chunk 1.
        let row = k / 32 * QK_BYTES;
        let b = 8 * row + 3 * row + QK_BYTES;
        let o = 8 * row + GROUP * QK_BYTES;
        assert_eq!(il[o + 6..o + 8], src[b..b + 2]);
        assert_eq!(il[o + 16 + 32 + 12..o + 16 + 32 + 16], src[b + 2 + 4..b + 2 + 8]);
        assert!(interleave(DType::Q4_0, &src[1..], rows, k).is_none());
        assert!(interleave(DType::Q4_0, &src, 12, k).is_none());
        assert!(interleave(DType::Q8_0, &src, rows, k).is_none());
        // IQ4_NL: Q4_0's shape.
        assert_eq!(interleave(DType::IQ4_NL, &src, rows, k).unwrap(), il);
        // MXFP4: the eight one-byte exponents, then the nibble words.
        let src: Vec<u8> = (0..rows * k / 32 * 17).map(|i| (i * 11 % 251) as u8).collect();
        let il = interleave(DType::MXFP4, &src, rows, k).unwrap();
        assert_eq!(deinterleave(DType::MXFP4, &il, rows, k).unwrap(), src);
        // Group 1, block 1, row 3: its exponent, and its nibble bytes 4..8 (chunk 1).
        let row = k / 32 * 17;
        let (b, o) = (8 * row + 3 * row + 17, 8 * row + 8 * 17);
        assert_eq!(il[o + 3], src[b]);
        assert_eq!(il[o + 8 + 32 + 12..o + 8 + 32 + 16], src[b + 1 + 4..b + 1 + 8]);
        // Q4_K: d and dmin of each row, then its scales and codes as 4-byte words.
        let (rows, k) = (8, 512);
        let src: Vec<u8> = (0..rows * 2 * 144).map(|i| (i * 13 % 251) as u8).collect();
        let il = interleave(DType::Q4_K, &src, rows, k).unwrap();
        assert_eq!(deinterleave(DType::Q4_K, &il, rows, k).unwrap(), src);
        // Row 5, block 1: dmin, then code bytes 36..40 (word 3 + 9).
        let (b, o) = (5 * 288 + 144, 8 * 144);
        assert_eq!(il[o + 16 + 10..o + 16 + 12], src[b + 2..b + 4]);
        assert_eq!(il[o + 32 + 32 * 12 + 20..o + 32 + 32 * 12 + 24], src[b + 16 + 36..b + 16 + 40]);
        // Q2_K: d and dmin (at the end of its block) first, then its scales and codes as words.
        let src: Vec<u8> = (0..rows * 2 * 84).map(|i| (i * 17 % 251) as u8).collect();
        let il = interleave(DType::Q2_K, &src, rows, k).unwrap();
        assert_eq!(deinterleave(DType::Q2_K, &il, rows, k).unwrap(), src);
        // Row 6, block 1: dmin; scale bytes 4..8 (word 1); code bytes 8..12 (word 6).
        let (b, o) = (6 * 168 + 84, 8 * 84);
        assert_eq!(il[o + 16 + 12..o + 16 + 14], src[b + 82..b + 84]);
        assert_eq!(il[o + 32 + 32 + 24..o + 32 + 32 + 28], src[b + 4..b + 8]);
        assert_eq!(il[o + 32 + 32 * 6 + 24..o + 32 + 32 * 6 + 28], src[b + 24..b + 28]);
    }
}
