//! AVX-512 VNNI matrix-vector products of the Q8_0 family (Q4_0, Q5_0, Q8_0, IQ4_NL) against
//! one Q8_0 activation row and of the Q4_1 family (Q4_1, Q5_1) against one Q8_1 row, for
//! decoding (one token, one column).
//!
//! # Same bits as the one-row kernels
//!
//! Each output is computed exactly as [`super::avx2`]'s one-row kernels (and llama.cpp) do:
//! one 8-lane f32 accumulator, blocks in order, `acc = fma(dx·dy, lanes, acc)` with lane `m`
//! the integer sum of the block's products `4m..4m+4`, then the same horizontal sum. What
//! changes is how the integer lanes are found, which cannot change their (exact) values:
//!
//! - `vpdpbusd` multiplies unsigned by signed bytes and sums groups of four straight into
//!   i32, where the AVX2 kernels need `vpsignb` twice, `vpmaddubsw` and `vpmaddwd`. The
//!   weights are unpacked *biased* to unsigned (`q + b`, `b` = 8, 16 or 128) and each lane
//!   starts from `-b·Σy` of its four activation bytes: `Σ(q+b)·y − b·Σy = Σq·y`, in i32, with
//!   no intermediate saturation.
//! - The activation side of every block (that start vector and the scale `dy` as f32) is
//!   [`Matvec::prepare`]d once per product and shared by all weight rows.
//! - Q8_0 weights, which need no unpacking, keep ggml's sign trick (`|x|` times `y` with `x`'s
//!   signs, here summed by one `vpdpbusd`), which needs no start vector.
//! - Q5_0's fifth bits go straight from the block into a mask register (a masked byte add),
//!   and the two nibble halves come from one broadcast load and one variable shift.
//! - The scale `dx·dy` is the f32 product of the exactly converted f16 scales, as before.
//!
//! # One row at a time
//!
//! Rows are computed one after another, each read front to back. Interleaving two or four
//! rows (independent FMA chains, fewer latency stalls) measured up to two times *slower* on
//! this project's AMD (Zen 4) machines, in the criterion bench and in decoding alike, and
//! software prefetching of the next rows did not recover it; interleaved weight streams seem
//! to defeat the hardware prefetchers that a matrix-vector product lives on.
//!
//! # Prefetching
//!
//! The loops prefetch [`PREFETCH`] bytes ahead of the weight block they read: a matrix-vector
//! product waits on memory, and the hardware prefetchers alone keep too little in flight
//! (criterion `matvec_model`, 2 threads: Gemma's Q8_0 output head 21 → 24-25 GiB/s, Qwen's
//! Q5_0 FFN gate 17.6 → 20-22 GiB/s with 2-4 KiB ahead; 8 KiB and more is worse again).

// The AVX-512 intrinsics are stable since Rust 1.89 (the toolchain here is newer); see the
// note in `avx512.rs`.
#![allow(clippy::incompatible_msrv)]

use super::avx2::{fp16, fp16x2, hsum_ps, ld128, ld256, rd};
use std::arch::x86_64::*;

/// The activation side of one Q8_0 or Q8_1 block: each lane's starting value `-b·Σy` (Q8_0)
/// and the block scale as f32 in all lanes, and (Q8_1) the block's `s` as f32.
#[derive(Clone, Copy, Default)]
#[repr(C, align(32))]
pub(in crate::matmul) struct BlockAux {
    /// `-b·Σy` over the four activation bytes of each lane.
    pub(in crate::matmul) start: [i32; 8],
    /// The activation block's scale, eight times.
    pub(in crate::matmul) dy: [f32; 8],
    /// A Q8_1 block's `s` (`d·Σq`).
    pub(in crate::matmul) sy: f32,
}

/// The weight rows `w` against one activation row `y` (its [`BlockAux`] at `aux`), row `r`'s
/// result to `out[r]`.
///
/// # Safety
/// `w`'s rows readable (`n / 32` blocks of the kernel's type each), `y` a Q8_0 row (Q8_1 for
/// the Q4_1 family) of `n` values, `aux` that row's `n / 32` prepared blocks, `out` room for
/// `w.count` f32; AVX-512 F/BW/VL/DQ/VNNI, AVX2, FMA, F16C.
pub(in crate::matmul) type MatvecFn = unsafe fn(WeightRows, *const u8, *const BlockAux, *mut f32);

/// The weight rows a row loop reads: `count` rows of `n` values each, the first at `x`, the
/// others `stride` bytes apart.
#[derive(Clone, Copy)]
pub(in crate::matmul) struct WeightRows {
    /// The first row.
    pub(in crate::matmul) x: *const u8,
    /// Values per row.
    pub(in crate::matmul) n: usize,
    /// Bytes from one row to the next.
    pub(in crate::matmul) stride: usize,
    /// Rows.
    pub(in crate::matmul) count: usize,
}

/// The matrix-vector kernel of one weight type.
#[derive(Clone, Copy)]
pub(in crate::matmul) struct Matvec {
    /// What the unpacked weights are biased by.
    bias: u8,
    /// Whether the activations are Q8_1 (the Q4_1 family), else Q8_0.
    q8_1: bool,
    /// The row loop.
    f: MatvecFn,
}

impl Matvec {
    /// The kernel of a Q8_0-family type (Q8_0 activations): `f`, its weights unpacked as
    /// unsigned bytes biased by `bias` (0: signed, by the sign trick, no start vector).
    pub(in crate::matmul) const fn signed(bias: u8, f: MatvecFn) -> Matvec {
        Matvec { bias, q8_1: false, f }
    }

    /// The kernel of a Q4_1-family type (Q8_1 activations, unbiased).
    pub(in crate::matmul) const fn q8_1(f: MatvecFn) -> Matvec {
        Matvec { bias: 0, q8_1: true, f }
    }

    /// Fills `aux` with the [`BlockAux`] of the activation row `y` (`n` values; Q8_0, or Q8_1
    /// for the Q4_1 family).
    ///
    /// # Safety
    /// `y` must be a readable row of `n` values (`n` a multiple of 32) of that type; AVX-512
    /// F/BW/VL/DQ/VNNI.
    pub(in crate::matmul) unsafe fn prepare(
        &self,
        n: usize,
        y: *const u8,
        aux: &mut Vec<BlockAux>,
    ) {
        aux.clear();
        aux.resize(n / 32, BlockAux::default());
        // SAFETY: forwarded; `aux` holds n / 32 blocks.
        unsafe { prepare(y, self.bias, self.q8_1, aux) }
    }

    /// `out[r] = dot(row r, y)` for the `out.len()` weight rows at `x`, `nb01` bytes apart.
    ///
    /// # Safety
    /// `x` must hold `out.len()` readable rows of `n` values of the kernel's type, `y` the
    /// Q8_0 row `aux` was prepared from, and the CPU AVX-512 F/BW/VL/DQ/VNNI.
    pub(in crate::matmul) unsafe fn run(
        &self,
        n: usize,
        x: *const u8,
        nb01: usize,
        y: *const u8,
        aux: &[BlockAux],
        out: &mut [f32],
    ) {
        assert_eq!(aux.len(), n / 32, "Matvec::run: aux prepared for another length");
        let w = WeightRows { x, n, stride: nb01, count: out.len() };
        // SAFETY: forwarded; `out` has room for its length.
        unsafe { (self.f)(w, y, aux.as_ptr(), out.as_mut_ptr()) }
    }
}

/// [`Matvec::prepare`]'s loop.
///
/// # Safety
/// `aux.len()` readable Q8_0 (`q8_1`: Q8_1) blocks at `y`; AVX-512 F/BW/VL/DQ/VNNI.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn prepare(y: *const u8, bias: u8, q8_1: bool, aux: &mut [BlockAux]) {
    let zero = _mm256_setzero_si256();
    let bias = _mm256_set1_epi8(bias as i8);
    let (size, qs) = if q8_1 { (36, 4) } else { (34, 2) };
    for (i, a) in aux.iter_mut().enumerate() {
        let yb = y.wrapping_add(size * i);
        // SAFETY: block i of the activation row (d, [s,] qs[32]).
        let (qy, dy) = unsafe { (ld256(yb.add(qs)), f16_bcast(yb)) };
        let start = _mm256_sub_epi32(zero, _mm256_dpbusd_epi32(zero, bias, qy));
        // SAFETY: `a` is aligned to 32: `start` then `dy`; a Q8_1 block's `s` follows `d`.
        unsafe {
            _mm256_store_si256(a.start.as_mut_ptr().cast(), start);
            _mm256_store_ps(a.dy.as_mut_ptr(), dy);
            if q8_1 {
                a.sy = fp16(rd::<u16>(yb.add(2)));
            }
        }
    }
}

/// How many bytes ahead of the weight block being read the loops prefetch.
pub(in crate::matmul) const PREFETCH: usize = 3072;

/// The f16 at `p` as f32 in all eight lanes. (A broadcast writes the whole register: a lone
/// f16 loaded into lane 0 lets LLVM insert it into whatever register is free, often an
/// accumulator, a false dependency that serializes the loop.)
///
/// # Safety
/// Two readable bytes at `p`; AVX2, F16C.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::matmul) unsafe fn f16_bcast(p: *const u8) -> __m256 {
    // SAFETY: two readable bytes (the caller's contract).
    _mm256_cvtph_ps(_mm_set1_epi16(unsafe { rd::<u16>(p) } as i16))
}

/// The row loop. `unpack(block)` gives a weight block's 32 values plus the bias, as unsigned
/// bytes; a block's f16 scale is its first two bytes.
///
/// # Safety
/// The [`MatvecFn`] contract with `xsize` bytes per weight block.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn rows_loop(
    w: WeightRows,
    y: *const u8,
    aux: *const BlockAux,
    out: *mut f32,
    xsize: usize,
    unpack: impl Fn(*const u8) -> __m256i,
) {
    let WeightRows { x, n, stride: nb01, count: nrows } = w;
    for r in 0..nrows {
        let row = x.wrapping_add(r * nb01);
        let mut acc = _mm256_setzero_ps();
        for i in 0..n / 32 {
            let b = row.wrapping_add(i * xsize);
            // A hint only: never faults, whatever the address.
            _mm_prefetch::<_MM_HINT_T0>(b.wrapping_add(PREFETCH).cast());
            // SAFETY: block i of weight row r, of the activation row and of its aux (the
            // contract); BlockAux is 32-byte aligned.
            let (q, dx, qy, start, dy) = unsafe {
                let a = aux.add(i);
                (
                    unpack(b),
                    f16_bcast(b),
                    ld256(y.add(34 * i + 2)),
                    _mm256_load_si256((*a).start.as_ptr().cast()),
                    _mm256_load_ps((*a).dy.as_ptr()),
                )
            };
            let p = _mm256_cvtepi32_ps(_mm256_dpbusd_epi32(start, q, qy));
            acc = _mm256_fmadd_ps(_mm256_mul_ps(dx, dy), p, acc);
        }
        // SAFETY: r < nrows, the room `out` has.
        unsafe { out.add(r).write(hsum_ps(acc)) };
    }
}

/// The 32 nibbles of the 16 bytes at `p`, low nibbles first (values 0..16): one broadcast
/// load, one variable shift, one mask.
///
/// # Safety
/// 16 readable bytes at `p`; AVX2.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::matmul) unsafe fn nibbles_at(p: *const u8) -> __m256i {
    // SAFETY: 16 readable bytes (the caller's contract).
    let both = _mm256_broadcastsi128_si256(unsafe { ld128(p) });
    let shifted = _mm256_srlv_epi64(both, _mm256_set_epi64x(4, 4, 0, 0));
    _mm256_and_si256(shifted, _mm256_set1_epi8(0x0F))
}

macro_rules! matvec {
    ($name:ident, $size:expr, $unpack:expr) => {
        matvec!($name, $size, $unpack, rows_loop, "Q8_0");
    };
    ($name:ident, $size:expr, $unpack:expr, $rows:ident, $act:literal) => {
        #[doc = concat!("Weight rows against one ", $act, " activation row.")]
        ///
        /// # Safety
        /// The [`MatvecFn`] contract.
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
        pub(in crate::matmul) unsafe fn $name(
            w: WeightRows,
            y: *const u8,
            aux: *const BlockAux,
            out: *mut f32,
        ) {
            let unpack = $unpack;
            // SAFETY: forwarded; `unpack` reads one whole block of a weight row.
            unsafe { $rows(w, y, aux, out, $size, unpack) }
        }
    };
}

matvec!(q4_0_mv, 18, |b: *const u8| {
    // SAFETY: a whole Q4_0 block (18 bytes: d, qs[16]).
    unsafe { nibbles_at(b.add(2)) }
});
/// The 32 values of the Q5_0 block at `b` plus 16 (0..32), as unsigned bytes: value `j` is
/// nibble `j` plus 16 where bit `j` of `qh` is set, a masked byte add.
///
/// # Safety
/// A whole Q5_0 block (22 bytes: d, qh[4], qs[16]) at `b`; AVX-512 BW/VL.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
pub(in crate::matmul) unsafe fn q5_0_biased(b: *const u8) -> __m256i {
    // SAFETY: the caller's contract.
    unsafe { five_bits(b.add(2), b.add(6)) }
}

/// 32 five-bit values: nibble `j` of the 16 bytes at `qs` plus 16 where bit `j` of the u32 at
/// `qh` is set (a masked byte add).
///
/// # Safety
/// 4 readable bytes at `qh`, 16 at `qs`; AVX-512 BW/VL.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
pub(in crate::matmul) unsafe fn five_bits(qh: *const u8, qs: *const u8) -> __m256i {
    // SAFETY: the caller's contract.
    let (qh, low) = unsafe { (rd::<u32>(qh), nibbles_at(qs)) };
    _mm256_mask_add_epi8(low, _cvtu32_mask32(qh), low, _mm256_set1_epi8(16))
}

matvec!(q5_0_mv, 22, |b: *const u8| {
    // SAFETY: a whole Q5_0 block of the row.
    unsafe { q5_0_biased(b) }
});
matvec!(iq4_nl_mv, 18, |b: *const u8| {
    // SAFETY: a whole IQ4_NL block (18 bytes: d, qs[16]); the table is 16 bytes.
    let (idx, table) = unsafe {
        (nibbles_at(b.add(2)), ld128(tessera_tensor::blocks::KVALUES_IQ4NL.as_ptr().cast()))
    };
    let biased = _mm_xor_si128(table, _mm_set1_epi8(0x80u8 as i8));
    _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(biased), idx)
});

/// Q8_0 weight rows against one Q8_0 activation row: ggml's sign trick (`|x|` by `y` with the
/// signs of `x`, exact in `vpdpbusd`'s i32 lanes), so no bias and no start vector.
///
/// # Safety
/// The [`MatvecFn`] contract.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
pub(in crate::matmul) unsafe fn q8_0_mv(
    w: WeightRows,
    y: *const u8,
    aux: *const BlockAux,
    out: *mut f32,
) {
    let WeightRows { x, n, stride: nb01, count: nrows } = w;
    let zero = _mm256_setzero_si256();
    for r in 0..nrows {
        let row = x.wrapping_add(r * nb01);
        let mut acc = _mm256_setzero_ps();
        for i in 0..n / 32 {
            let b = row.wrapping_add(i * 34);
            // A hint only: never faults, whatever the address.
            _mm_prefetch::<_MM_HINT_T0>(b.wrapping_add(PREFETCH).cast());
            // SAFETY: block i of weight row r (34 bytes: d, qs[32]), of the activation row and
            // of its aux (the contract); BlockAux is 32-byte aligned.
            let (qx, dx, qy, dy) = unsafe {
                (
                    ld256(b.add(2)),
                    f16_bcast(b),
                    ld256(y.add(34 * i + 2)),
                    _mm256_load_ps((*aux.add(i)).dy.as_ptr()),
                )
            };
            let ax = _mm256_sign_epi8(qx, qx);
            let sy = _mm256_sign_epi8(qy, qx);
            let p = _mm256_cvtepi32_ps(_mm256_dpbusd_epi32(zero, ax, sy));
            acc = _mm256_fmadd_ps(_mm256_mul_ps(dx, dy), p, acc);
        }
        // SAFETY: r < nrows, the room `out` has.
        unsafe { out.add(r).write(hsum_ps(acc)) };
    }
}

/// The row loop of the Q4_1 family against a Q8_1 activation row, in ggml's order:
/// `acc = fma(dx·dy, lanes, acc)` and `summs += mx·sy` per block, then `hsum(acc) + summs`.
/// `unpack(block)` gives the block's 32 unsigned values (its f16 `d` and `m` lead it).
///
/// # Safety
/// The [`MatvecFn`] contract (a Q8_1 activation row) with `xsize` bytes per weight block.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn rows_loop_q8_1(
    w: WeightRows,
    y: *const u8,
    aux: *const BlockAux,
    out: *mut f32,
    xsize: usize,
    unpack: impl Fn(*const u8) -> __m256i,
) {
    let WeightRows { x, n, stride: nb01, count: nrows } = w;
    let zero = _mm256_setzero_si256();
    for r in 0..nrows {
        let row = x.wrapping_add(r * nb01);
        let mut acc = _mm256_setzero_ps();
        let mut summs = 0f32;
        for i in 0..n / 32 {
            let b = row.wrapping_add(i * xsize);
            // A hint only: never faults, whatever the address.
            _mm_prefetch::<_MM_HINT_T0>(b.wrapping_add(PREFETCH).cast());
            // SAFETY: block i of weight row r, of the Q8_1 activation row (36 bytes: d, s,
            // qs[32]) and of its aux (the contract).
            let (q, dm, qy, dy, sy) = unsafe {
                let a = aux.add(i);
                (unpack(b), rd::<u32>(b), ld256(y.add(36 * i + 4)), (*a).dy[0], (*a).sy)
            };
            let (dx, mx) = fp16x2(dm);
            summs += mx * sy;
            let p = _mm256_cvtepi32_ps(_mm256_dpbusd_epi32(zero, q, qy));
            acc = _mm256_fmadd_ps(_mm256_set1_ps(dx * dy), p, acc);
        }
        // SAFETY: r < nrows, the room `out` has.
        unsafe { out.add(r).write(hsum_ps(acc) + summs) };
    }
}

matvec!(
    q4_1_mv,
    20,
    |b: *const u8| {
        // SAFETY: a whole Q4_1 block (20 bytes: d, m, qs[16]).
        unsafe { nibbles_at(b.add(4)) }
    },
    rows_loop_q8_1,
    "Q8_1"
);
matvec!(
    q5_1_mv,
    24,
    |b: *const u8| {
        // SAFETY: a whole Q5_1 block (24 bytes: d, m, qh[4], qs[16]).
        unsafe { five_bits(b.add(4), b.add(8)) }
    },
    rows_loop_q8_1,
    "Q8_1"
);
