//! AVX2 (+FMA, F16C) dot products of the float types and the 32-value block types, and the
//! helpers every x86 kernel shares.
//!
//! Kernels that have a four-row form are written once, generic over the number of activation
//! rows `C`: the one-row kernel is `C = 1`, so both do the same arithmetic in the same order
//! for each row and a result never depends on how the rows were tiled.

#[cfg(doc)]
use crate::matmul::VecDot;
#[cfg(doc)]
use crate::matmul::VecDot4;
use std::arch::x86_64::*;

// ---------------------------------------------------------------------------------------------
// Helpers.

/// Sum of the 8 lanes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn hsum_ps(x: __m256) -> f32 {
    let mut r = _mm_add_ps(_mm256_extractf128_ps::<1>(x), _mm256_castps256_ps128(x));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    _mm_cvtss_f32(r)
}

/// Sum of the 8 i32 lanes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::matmul) fn hsum_epi32(x: __m256i) -> i32 {
    let s = _mm_add_epi32(_mm256_castsi256_si128(x), _mm256_extracti128_si256::<1>(x));
    let s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b10_11_00_01>(s));
    _mm_cvtsi128_si32(s)
}

/// Two f16 values packed in `bits` (low half first) as f32, with one F16C conversion of a
/// general register. (Converting a lone f16 loaded from memory lets LLVM insert it into
/// whatever vector register is free, often a loop's accumulator: a false dependency that
/// serializes the loop.)
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::matmul) fn fp16x2(bits: u32) -> (f32, f32) {
    let v = _mm_cvtph_ps(_mm_cvtsi32_si128(bits as i32));
    (_mm_cvtss_f32(v), _mm_cvtss_f32(_mm_movehdup_ps(v)))
}

/// One f16 value as f32 by bit manipulation (exact, infinities and NaNs kept): for scales
/// read once per large block, where a vector conversion would risk the false dependency
/// [`fp16x2`] describes.
#[inline]
pub(in crate::matmul) fn fp16(h: u16) -> f32 {
    let h = u32::from(h);
    let sign = (h & 0x8000) << 16;
    if h & 0x7c00 == 0x7c00 {
        return f32::from_bits(sign | 0x7f80_0000 | ((h & 0x3ff) << 13));
    }
    // Exponent and mantissa moved into place, then rebiased by 2^(127 - 15) (exact, also for
    // subnormal halves).
    f32::from_bits(sign | ((h & 0x7fff) << 13)) * f32::from_bits(0x7780_0000)
}

/// `Σ x·y` of unsigned `x` by signed `y` bytes (pair sums must fit in i16), in groups of four,
/// as 8 i32 lanes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::matmul) fn dot_u8_i8(x: __m256i, y: __m256i) -> __m256i {
    _mm256_madd_epi16(_mm256_maddubs_epi16(x, y), _mm256_set1_epi16(1))
}

/// 32 bytes, 0xFF where bit `k` of `bits` is set (ggml's `bytes_from_bits_32`).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::matmul) fn bytes_from_bits(bits: u32) -> __m256i {
    let shuf =
        _mm256_set_epi64x(0x0303_0303_0303_0303, 0x0202_0202_0202_0202, 0x0101_0101_0101_0101, 0);
    let bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(bits as i32), shuf);
    let bytes = _mm256_or_si256(bytes, _mm256_set1_epi64x(0x7fbf_dfef_f7fb_fdfe));
    _mm256_cmpeq_epi8(bytes, _mm256_set1_epi64x(-1))
}

/// 16 packed nibbles as 32 bytes: low nibbles first, then high (values 0..16).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::matmul) fn nibbles(qs: __m128i) -> __m256i {
    let both = _mm256_set_m128i(_mm_srli_epi16::<4>(qs), qs);
    _mm256_and_si256(both, _mm256_set1_epi8(0x0F))
}

/// Unaligned 32-byte load.
///
/// # Safety
/// 32 readable bytes at `p`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::matmul) unsafe fn ld256(p: *const u8) -> __m256i {
    // SAFETY: by the caller's contract.
    unsafe { _mm256_loadu_si256(p.cast()) }
}

/// Unaligned 16-byte load.
///
/// # Safety
/// 16 readable bytes at `p`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::matmul) unsafe fn ld128(p: *const u8) -> __m128i {
    // SAFETY: by the caller's contract.
    unsafe { _mm_loadu_si128(p.cast()) }
}

/// Unaligned little-endian read of a `T`.
///
/// # Safety
/// `size_of::<T>()` readable bytes at `p`.
#[inline(always)]
pub(in crate::matmul) unsafe fn rd<T: Copy>(p: *const u8) -> T {
    // SAFETY: by the caller's contract.
    unsafe { p.cast::<T>().read_unaligned() }
}

// ---------------------------------------------------------------------------------------------
// Float types.

/// F16 · F16 against `C` rows, in llama.cpp's order for an AVX2 build: where `n` is a
/// multiple of 8 (when its MUL_MAT takes llamafile's tinyBLAS) one accumulator of 8 lanes in
/// `k` order, summed as [`hsum_ps`]; otherwise `ggml_vec_dot_f16` (its fallback).
///
/// # Safety
/// The [`VecDot4`] contract for each of the `C` rows, and AVX2/FMA/F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::matmul) unsafe fn f16_f16_n<const C: usize>(
    n: usize,
    x: *const u8,
    y: [*const u8; C],
) -> [f32; C] {
    if n % 8 != 0 {
        // SAFETY: n f16 values in each row (the VecDot4 contract).
        return y.map(|y| unsafe {
            crate::matmul::dot_f16::dot(n, x.cast(), y.cast(), crate::SimdLevel::Avx2)
        });
    }
    let mut acc = [_mm256_setzero_ps(); C];
    for i in (0..n).step_by(8) {
        // SAFETY: elements i..i + 8 <= n of every row.
        let u = _mm256_cvtph_ps(unsafe { ld128(x.add(2 * i)) });
        for (a, y) in acc.iter_mut().zip(y) {
            // SAFETY: as above.
            let v = _mm256_cvtph_ps(unsafe { ld128(y.add(2 * i)) });
            *a = _mm256_fmadd_ps(u, v, *a);
        }
    }
    acc.map(|a| hsum_ps(a))
}

/// F16 · F16.
///
/// # Safety
/// The [`VecDot`] contract, and AVX2/FMA/F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::matmul) unsafe fn f16_f16(n: usize, x: *const u8, y: *const u8) -> f32 {
    // SAFETY: forwarded.
    unsafe { f16_f16_n::<1>(n, x, [y])[0] }
}

// ---------------------------------------------------------------------------------------------
// 32-value blocks against Q8_0 / Q8_1 (block sizes: Q8_0 34 bytes, d at 0, qs at 2; Q8_1 36,
// d at 0, s at 2, qs at 4).

/// The f16 scales of block `i` of up to four Q8_0 rows, converted in one F16C instruction
/// (lane `c` is row `c`'s; lanes past `y.len()` are zero).
///
/// # Safety
/// Block `i` of every row in `y` must be readable; `y.len() <= 4`; F16C.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q8_0_scales(y: &[*const u8], i: usize) -> __m128 {
    let mut halves = 0u64;
    for (c, y) in y.iter().enumerate() {
        // SAFETY: the f16 scale of block i of activation row c (the caller's contract).
        halves |= u64::from(unsafe { rd::<u16>(y.wrapping_add(34 * i)) }) << (16 * c);
    }
    _mm_cvtph_ps(_mm_cvtsi64_si128(halves as i64))
}

/// Generic block loop against `C` (at most four) Q8_0 rows, one accumulator per row, blocks
/// in order: the order of ggml's `ggml_vec_dot_*_q8_0` and of llamafile's tinyBLAS (which
/// llama.cpp uses for these types), so results are the same bits. `unpack(block)` gives the
/// block's raw scale and 32 signed weight bytes. The scale of each product is the weight scale
/// times the f16 activation scale, rounded once: with an f16 weight scale (`MX = false`: Q4_0,
/// Q5_0, Q8_0, IQ4_NL) the block's `C` activation scales are converted in one F16C
/// instruction and multiplied in one `mulps` (the bits of both converted, then one product); MXFP4's (`MX`) is half
/// its E8M0 exponent.
///
/// # Safety
/// The [`VecDot4`] contract for each row, `xsize` bytes per weight block, and AVX2/FMA/F16C.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q8_0_rows<const C: usize, const MX: bool>(
    n: usize,
    x: *const u8,
    xsize: usize,
    y: [*const u8; C],
    unpack: impl Fn(*const u8) -> (u16, __m256i),
) -> [f32; C] {
    assert!(C <= 4);
    let nb = n / 32;
    let mut acc = [_mm256_setzero_ps(); C];
    for i in 0..nb {
        let (dx, qx) = unpack(x.wrapping_add(i * xsize));
        let ax = _mm256_sign_epi8(qx, qx);
        // SAFETY: block i of every activation row (the caller's contract).
        let dys = unsafe { q8_0_scales(&y, i) };
        let dxs = if MX {
            _mm_set1_ps(crate::matmul::scalar::e8m0_half(dx as u8))
        } else {
            _mm_cvtph_ps(_mm_set1_epi16(dx as i16))
        };
        let mut scales = [0f32; 4];
        // SAFETY: four f32 into a four-f32 array.
        unsafe { _mm_storeu_ps(scales.as_mut_ptr(), _mm_mul_ps(dxs, dys)) };
        for ((a, y), &sc) in acc.iter_mut().zip(y).zip(&scales) {
            // SAFETY: block i of this activation row (32 bytes after its scale).
            let qy = unsafe { ld256(y.wrapping_add(34 * i + 2)) };
            let p = _mm256_cvtepi32_ps(dot_u8_i8(ax, _mm256_sign_epi8(qy, qx)));
            *a = _mm256_fmadd_ps(_mm256_set1_ps(sc), p, *a);
        }
    }
    acc.map(|a| hsum_ps(a))
}

/// A Q4_0 block's f16 scale and its 32 values (nibble − 8) as signed bytes.
///
/// # Safety
/// `b` must be a whole readable Q4_0 block (18 bytes: d, qs[16]); AVX2.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::matmul) unsafe fn q4_0_block(b: *const u8) -> (u16, __m256i) {
    // SAFETY: by the caller's contract.
    let (d, qs) = unsafe { (rd::<u16>(b), ld128(b.add(2))) };
    (d, _mm256_sub_epi8(nibbles(qs), _mm256_set1_epi8(8)))
}

/// A Q8_0 block's f16 scale and its 32 signed bytes.
///
/// # Safety
/// `b` must be a whole readable Q8_0 block (34 bytes: d, qs[32]); AVX2.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::matmul) unsafe fn q8_0_block(b: *const u8) -> (u16, __m256i) {
    // SAFETY: by the caller's contract.
    unsafe { (rd::<u16>(b), ld256(b.add(2))) }
}

/// A Q5_0 block's f16 scale and its 32 values as signed bytes: the fifth bit, when clear,
/// turns the nibble into `nibble − 16`.
///
/// # Safety
/// `b` must be a whole readable Q5_0 block (22 bytes: d, qh[4], qs[16]); AVX2.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::matmul) unsafe fn q5_0_block(b: *const u8) -> (u16, __m256i) {
    // SAFETY: by the caller's contract.
    let (d, qh, qs) = unsafe { (rd::<u16>(b), rd::<u32>(b.add(2)), ld128(b.add(6))) };
    let high = _mm256_andnot_si256(bytes_from_bits(qh), _mm256_set1_epi8(0xF0u8 as i8));
    (d, _mm256_or_si256(nibbles(qs), high))
}

/// `kvalues_iq4nl` in both 128-bit lanes, for [`iq4_nl_block`].
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::matmul) fn iq4_nl_table() -> __m256i {
    // SAFETY: the table is 16 bytes.
    _mm256_broadcastsi128_si256(unsafe {
        ld128(tessera_tensor::blocks::KVALUES_IQ4NL.as_ptr().cast())
    })
}

/// `kvalues_mxfp4` (the doubled E2M1 values) in both lanes, for byte shuffles.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::matmul) fn mxfp4_table() -> __m256i {
    // SAFETY: the table is 16 bytes.
    _mm256_broadcastsi128_si256(unsafe {
        ld128(tessera_tensor::blocks::KVALUES_MXFP4.as_ptr().cast())
    })
}

/// An MXFP4 block's E8M0 exponent and its 32 values (table entries) as signed bytes.
///
/// # Safety
/// `b` must be a whole readable MXFP4 block (17 bytes: e, qs[16]); AVX2.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::matmul) unsafe fn mxfp4_block(table: __m256i, b: *const u8) -> (u8, __m256i) {
    // SAFETY: by the caller's contract.
    let (e, qs) = unsafe { (*b, ld128(b.add(1))) };
    (e, _mm256_shuffle_epi8(table, nibbles(qs)))
}

/// An IQ4_NL block's f16 scale and its 32 values (table entries) as signed bytes.
///
/// # Safety
/// `b` must be a whole readable IQ4_NL block (18 bytes: d, qs[16]); AVX2.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::matmul) unsafe fn iq4_nl_block(table: __m256i, b: *const u8) -> (u16, __m256i) {
    // SAFETY: by the caller's contract.
    let (d, qs) = unsafe { (rd::<u16>(b), ld128(b.add(2))) };
    (d, _mm256_shuffle_epi8(table, nibbles(qs)))
}

/// Four weight rows against four Q8_1 activation rows (a 4x4 tile): each block of every
/// weight row is unpacked once and each activation block loaded once for the sixteen
/// products; every output still accumulates its blocks in order (same bits as
/// [`q8_1_rows`]). For the Q8_0 family (whose sign trick needs more registers) a 4x4 tile
/// measured slower: it takes two 2x4 passes ([`q8_0_tile`]).
///
/// # Safety
/// The [`TileFn`](crate::matmul::TileFn) contract (4 columns), `xsize` bytes per weight block,
/// AVX2/FMA/F16C.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q8_1_tile(
    n: usize,
    x: [*const u8; 4],
    xsize: usize,
    y: [*const u8; 4],
    unpack: impl Fn(*const u8) -> (u32, __m256i),
) -> [[f32; 4]; 4] {
    let mut acc = [[_mm256_setzero_ps(); 4]; 4];
    let mut summs = [[0f32; 4]; 4];
    for i in 0..n / 32 {
        let mut qy = [_mm256_setzero_si256(); 4];
        let mut dsy = [(0f32, 0f32); 4];
        for c in 0..4 {
            let yb = y[c].wrapping_add(36 * i);
            // SAFETY: block i of activation row c.
            let (ds, q) = unsafe { (rd::<u32>(yb), ld256(yb.add(4))) };
            (dsy[c], qy[c]) = (fp16x2(ds), q);
        }
        for (r, (a, s)) in acc.iter_mut().zip(summs.iter_mut()).enumerate() {
            let (dm, qx) = unpack(x[r].wrapping_add(i * xsize));
            let (dx, mx) = fp16x2(dm);
            for c in 0..4 {
                let (dy, sy) = dsy[c];
                s[c] += mx * sy;
                let p = _mm256_cvtepi32_ps(dot_u8_i8(qx, qy[c]));
                a[c] = _mm256_fmadd_ps(_mm256_set1_ps(dx * dy), p, a[c]);
            }
        }
    }
    std::array::from_fn(|r| std::array::from_fn(|c| hsum_ps(acc[r][c]) + summs[r][c]))
}

/// Two weight rows against four Q8_0 activation rows (a 2x4 tile; eight accumulators, which
/// leaves registers for the sign trick): each weight block is unpacked once for four products
/// and each activation block and scale loaded once for two weight rows. Every output
/// accumulates its blocks in order with the scale `dx·dy` rounded once, exactly as
/// [`q8_0_rows`], so the bits are the one-row kernel's.
///
/// # Safety
/// The [`VecDot4`] contract for each weight row, `xsize` bytes per weight
/// block, AVX2/FMA/F16C.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q8_0_tile24(
    n: usize,
    x: [*const u8; 2],
    xsize: usize,
    y: [*const u8; 4],
    unpack: impl Fn(*const u8) -> (u16, __m256i),
) -> [[f32; 4]; 2] {
    let mut acc = [[_mm256_setzero_ps(); 4]; 2];
    for i in 0..n / 32 {
        // SAFETY: block i of every activation row (the caller's contract).
        let dys = unsafe { q8_0_scales(&y, i) };
        // Both weight blocks first, then one activation block at a time against both: the
        // live registers are the eight accumulators, two weight blocks (values and their
        // magnitudes) and one activation block.
        let mut sc = [[0f32; 4]; 2];
        let mut qx = [_mm256_setzero_si256(); 2];
        for r in 0..2 {
            let (dx, q) = unpack(x[r].wrapping_add(i * xsize));
            let scales = _mm_mul_ps(_mm_cvtph_ps(_mm_set1_epi16(dx as i16)), dys);
            // SAFETY: four f32 into a four-f32 array.
            unsafe { _mm_storeu_ps(sc[r].as_mut_ptr(), scales) };
            qx[r] = q;
        }
        let ax = [_mm256_sign_epi8(qx[0], qx[0]), _mm256_sign_epi8(qx[1], qx[1])];
        for c in 0..4 {
            // SAFETY: the 32 quants of block i of activation row c.
            let qy = unsafe { ld256(y[c].wrapping_add(34 * i + 2)) };
            for r in 0..2 {
                let p = _mm256_cvtepi32_ps(dot_u8_i8(ax[r], _mm256_sign_epi8(qy, qx[r])));
                acc[r][c] = _mm256_fmadd_ps(_mm256_set1_ps(sc[r][c]), p, acc[r][c]);
            }
        }
    }
    std::array::from_fn(|r| std::array::from_fn(|c| hsum_ps(acc[r][c])))
}

/// Four weight rows against four Q8_0 activation rows as two [`q8_0_tile24`] passes (rows
/// 0-1, then 2-3; the second reads the activation blocks again from cache).
///
/// # Safety
/// As [`q8_0_tile24`], for four weight rows.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q8_0_tile(
    n: usize,
    x: [*const u8; 4],
    xsize: usize,
    y: [*const u8; 4],
    unpack: impl Fn(*const u8) -> (u16, __m256i),
) -> [[f32; 4]; 4] {
    // SAFETY: forwarded, two weight rows at a time.
    let (a, b) = unsafe {
        (
            q8_0_tile24(n, [x[0], x[1]], xsize, y, &unpack),
            q8_0_tile24(n, [x[2], x[3]], xsize, y, &unpack),
        )
    };
    [a[0], a[1], b[0], b[1]]
}

macro_rules! tile_kernel {
    ($name:ident, $size:expr, $tile:path, $unpack:expr) => {
        /// A 4x4 tile: four weight rows against `y[..4]`.
        ///
        /// # Safety
        /// The [`TileFn`](crate::matmul::TileFn) contract, and AVX2/FMA/F16C.
        #[target_feature(enable = "avx2,fma,f16c")]
        pub(in crate::matmul) unsafe fn $name(
            n: usize,
            x: [*const u8; 4],
            y: &[*const u8; 8],
            outs: &[*mut f32; 8],
        ) {
            let y = [y[0], y[1], y[2], y[3]];
            // SAFETY: forwarded; `unpack` reads one whole block of a weight row.
            let v = unsafe { $tile(n, x, $size, y, $unpack) };
            for (r, v) in v.iter().enumerate() {
                for (o, &v) in outs.iter().zip(v) {
                    // SAFETY: outs[c] has room for four results (the TileFn contract).
                    unsafe { o.add(r).write(v) };
                }
            }
        }
    };
}

tile_kernel!(q4_1_t44, 20, q8_1_tile, |b: *const u8| {
    let (dm, qs) = (rd::<u32>(b), ld128(b.add(4)));
    (dm, nibbles(qs))
});
tile_kernel!(q5_1_t44, 24, q8_1_tile, |b: *const u8| {
    let (dm, qh, qs) = (rd::<u32>(b), rd::<u32>(b.add(4)), ld128(b.add(8)));
    let high = _mm256_and_si256(bytes_from_bits(qh), _mm256_set1_epi8(0x10));
    (dm, _mm256_or_si256(nibbles(qs), high))
});

tile_kernel!(q4_0_t44, 18, q8_0_tile, |b: *const u8| q4_0_block(b));
tile_kernel!(q5_0_t44, 22, q8_0_tile, |b: *const u8| q5_0_block(b));
tile_kernel!(q8_0_t44, 34, q8_0_tile, |b: *const u8| q8_0_block(b));
tile_kernel!(iq4_nl_t44, 18, q8_0_tile, {
    let table = iq4_nl_table();
    move |b: *const u8| iq4_nl_block(table, b)
});

/// Q4_0 · Q8_0 against `C` rows.
///
/// # Safety
/// The [`VecDot4`] contract for each row, and AVX2/FMA/F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::matmul) unsafe fn q4_0_q8_0_n<const C: usize>(
    n: usize,
    x: *const u8,
    y: [*const u8; C],
) -> [f32; C] {
    // SAFETY: `b` is a whole Q4_0 block of the row.
    let unpack = |b: *const u8| unsafe { q4_0_block(b) };
    // SAFETY: forwarded.
    unsafe { q8_0_rows::<C, false>(n, x, 18, y, unpack) }
}

/// Q4_0 · Q8_0.
///
/// # Safety
/// The [`VecDot`] contract, and AVX2/FMA/F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::matmul) unsafe fn q4_0_q8_0(n: usize, x: *const u8, y: *const u8) -> f32 {
    // SAFETY: forwarded.
    unsafe { q4_0_q8_0_n::<1>(n, x, [y])[0] }
}

/// Q8_0 · Q8_0 against `C` rows.
///
/// # Safety
/// The [`VecDot4`] contract for each row, and AVX2/FMA/F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::matmul) unsafe fn q8_0_q8_0_n<const C: usize>(
    n: usize,
    x: *const u8,
    y: [*const u8; C],
) -> [f32; C] {
    // SAFETY: `b` is a whole Q8_0 block of the row.
    let unpack = |b: *const u8| unsafe { q8_0_block(b) };
    // SAFETY: forwarded.
    unsafe { q8_0_rows::<C, false>(n, x, 34, y, unpack) }
}

/// Q8_0 · Q8_0.
///
/// # Safety
/// The [`VecDot`] contract, and AVX2/FMA/F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::matmul) unsafe fn q8_0_q8_0(n: usize, x: *const u8, y: *const u8) -> f32 {
    // SAFETY: forwarded.
    unsafe { q8_0_q8_0_n::<1>(n, x, [y])[0] }
}

/// Q5_0 · Q8_0 against `C` rows: the fifth bit, when clear, turns the nibble into
/// `nibble - 16`.
///
/// # Safety
/// The [`VecDot4`] contract for each row, and AVX2/FMA/F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::matmul) unsafe fn q5_0_q8_0_n<const C: usize>(
    n: usize,
    x: *const u8,
    y: [*const u8; C],
) -> [f32; C] {
    // SAFETY: `b` is a whole Q5_0 block of the row.
    let unpack = |b: *const u8| unsafe { q5_0_block(b) };
    // SAFETY: forwarded.
    unsafe { q8_0_rows::<C, false>(n, x, 22, y, unpack) }
}

/// Q5_0 · Q8_0.
///
/// # Safety
/// The [`VecDot`] contract, and AVX2/FMA/F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::matmul) unsafe fn q5_0_q8_0(n: usize, x: *const u8, y: *const u8) -> f32 {
    // SAFETY: forwarded.
    unsafe { q5_0_q8_0_n::<1>(n, x, [y])[0] }
}

/// IQ4_NL · Q8_0 against `C` rows: nibbles index `kvalues_iq4nl` (a byte shuffle).
///
/// # Safety
/// The [`VecDot4`] contract for each row, and AVX2/FMA/F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::matmul) unsafe fn iq4_nl_q8_0_n<const C: usize>(
    n: usize,
    x: *const u8,
    y: [*const u8; C],
) -> [f32; C] {
    let table = iq4_nl_table();
    // SAFETY: `b` is a whole IQ4_NL block of the row.
    let unpack = |b: *const u8| unsafe { iq4_nl_block(table, b) };
    // SAFETY: forwarded.
    unsafe { q8_0_rows::<C, false>(n, x, 18, y, unpack) }
}

/// IQ4_NL · Q8_0.
///
/// # Safety
/// The [`VecDot`] contract, and AVX2/FMA/F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::matmul) unsafe fn iq4_nl_q8_0(n: usize, x: *const u8, y: *const u8) -> f32 {
    // SAFETY: forwarded.
    unsafe { iq4_nl_q8_0_n::<1>(n, x, [y])[0] }
}

/// MXFP4 · Q8_0 against `C` rows: nibbles index the doubled E2M1 values, scaled by half the
/// E8M0 exponent.
///
/// # Safety
/// The [`VecDot4`] contract for each row, and AVX2/FMA/F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::matmul) unsafe fn mxfp4_q8_0_n<const C: usize>(
    n: usize,
    x: *const u8,
    y: [*const u8; C],
) -> [f32; C] {
    let table = mxfp4_table();
    let unpack = |b: *const u8| {
        // SAFETY: `b` is a whole MXFP4 block (17 bytes: e, qs[16]).
        let (e, q) = unsafe { mxfp4_block(table, b) };
        (u16::from(e), q)
    };
    // SAFETY: forwarded.
    unsafe { q8_0_rows::<C, true>(n, x, 17, y, unpack) }
}

/// MXFP4 · Q8_0.
///
/// # Safety
/// The [`VecDot`] contract, and AVX2/FMA/F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::matmul) unsafe fn mxfp4_q8_0(n: usize, x: *const u8, y: *const u8) -> f32 {
    // SAFETY: forwarded.
    unsafe { mxfp4_q8_0_n::<1>(n, x, [y])[0] }
}

/// Generic block loop of the `d·q + m` types against Q8_1: `Σ (dx·dy)·Σq·y + m·s`.
/// `unpack(block)` gives `d` and `m` (two f16, packed) and 32 unsigned weight bytes (0..32).
///
/// # Safety
/// The [`VecDot`] contract, `xsize` bytes per weight block, and AVX2/FMA/F16C.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q8_1_rows<const C: usize>(
    n: usize,
    x: *const u8,
    xsize: usize,
    y: [*const u8; C],
    unpack: impl Fn(*const u8) -> (u32, __m256i),
) -> [f32; C] {
    let mut acc = [_mm256_setzero_ps(); C];
    let mut summs = [0f32; C];
    for i in 0..n / 32 {
        let (dm, qx) = unpack(x.wrapping_add(i * xsize));
        let (dx, mx) = fp16x2(dm);
        for ((a, s), y) in acc.iter_mut().zip(summs.iter_mut()).zip(y) {
            let yb = y.wrapping_add(36 * i);
            // SAFETY: block i of the activation row.
            let (ds, qy) = unsafe { (rd::<u32>(yb), ld256(yb.add(4))) };
            let (dy, sy) = fp16x2(ds);
            *s += mx * sy;
            let p = _mm256_cvtepi32_ps(dot_u8_i8(qx, qy));
            *a = _mm256_fmadd_ps(_mm256_set1_ps(dx * dy), p, *a);
        }
    }
    std::array::from_fn(|r| hsum_ps(acc[r]) + summs[r])
}

/// Q4_1 · Q8_1 against `C` rows.
///
/// # Safety
/// The [`VecDot4`] contract for each row, and AVX2/FMA/F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::matmul) unsafe fn q4_1_q8_1_n<const C: usize>(
    n: usize,
    x: *const u8,
    y: [*const u8; C],
) -> [f32; C] {
    let unpack = |b: *const u8| {
        // SAFETY: `b` is a whole Q4_1 block (20 bytes: d, m, qs[16]).
        let (dm, qs) = unsafe { (rd::<u32>(b), ld128(b.add(4))) };
        (dm, nibbles(qs))
    };
    // SAFETY: forwarded.
    unsafe { q8_1_rows(n, x, 20, y, unpack) }
}

/// Q4_1 · Q8_1.
///
/// # Safety
/// The [`VecDot`] contract, and AVX2/FMA/F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::matmul) unsafe fn q4_1_q8_1(n: usize, x: *const u8, y: *const u8) -> f32 {
    // SAFETY: forwarded.
    unsafe { q4_1_q8_1_n::<1>(n, x, [y])[0] }
}

/// Q5_1 · Q8_1 against `C` rows.
///
/// # Safety
/// The [`VecDot4`] contract for each row, and AVX2/FMA/F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::matmul) unsafe fn q5_1_q8_1_n<const C: usize>(
    n: usize,
    x: *const u8,
    y: [*const u8; C],
) -> [f32; C] {
    let unpack = |b: *const u8| {
        // SAFETY: `b` is a whole Q5_1 block (24 bytes: d, m, qh[4], qs[16]).
        let (dm, qh, qs) = unsafe { (rd::<u32>(b), rd::<u32>(b.add(4)), ld128(b.add(8))) };
        let high = _mm256_and_si256(bytes_from_bits(qh), _mm256_set1_epi8(0x10));
        (dm, _mm256_or_si256(nibbles(qs), high))
    };
    // SAFETY: forwarded.
    unsafe { q8_1_rows(n, x, 24, y, unpack) }
}

/// Q5_1 · Q8_1.
///
/// # Safety
/// The [`VecDot`] contract, and AVX2/FMA/F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::matmul) unsafe fn q5_1_q8_1(n: usize, x: *const u8, y: *const u8) -> f32 {
    // SAFETY: forwarded.
    unsafe { q5_1_q8_1_n::<1>(n, x, [y])[0] }
}
