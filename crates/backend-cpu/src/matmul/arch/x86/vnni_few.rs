//! AVX-512 VNNI products of the Q8_0 and Q4_1 families' weights with 2-16 activation rows
//! (several sequences decoding together): each weight block is unpacked once and multiplied
//! by the block of every activation row, so the unpacking, the weight scale and the weight
//! stream are paid once per block instead of once per block and row.
//!
//! # Same bits as one row at a time
//!
//! Every output keeps [`super::vnni_matvec`]'s one-row arithmetic: its own 8-lane f32
//! accumulator, blocks in order, `acc = fma(dx·dy, lanes, acc)` with lane `m` the exact
//! integer sum of the block's products `4m..4m+4`, then the same horizontal sum (and the Q4_1
//! family's `summs`, added per block in order). Only the loop order and how the exact integer
//! lanes are found change:
//!
//! - Q8_0 family (Q4_0, Q5_0, Q8_0, IQ4_NL): the roles of `vpdpbusd`'s operands are swapped.
//!   The weights are unpacked *signed* and the activations biased to unsigned (`y + 128`,
//!   once, when the rows are prepared), and each lane starts from `-128·Σq` of its four
//!   weight bytes: `Σ(y+128)·q − 128·Σq = Σq·y`, exact in i32. That start belongs to the
//!   weight block, so it is found once per block for all rows, and each row costs one load
//!   of its biased bytes and scale, one `vpdpbusd`, one conversion, one multiply, one FMA.
//! - The activation rows are prepared once per pass ([`Scratch`]): their bytes biased, block
//!   by block for all rows (`block · rows + row`), and their scales as f32, so one weight
//!   block meets every row's block from one cache line run. Each row keeps its own 256-bit
//!   accumulator; with `N` rows there are `N` independent FMA chains per weight row.
//! - Q4_1 family (2-8 rows; its 4x8 tiles are as fast beyond): the one-row kernel's loop with
//!   blocks outer and rows inner.
//!
//! The row count is a const parameter, so the accumulators and the activation pointers are
//! fixed-size arrays that LLVM keeps in registers.

// The AVX-512 intrinsics are stable since Rust 1.89 (the toolchain here is newer); see the
// note in `avx512.rs`.
#![allow(clippy::incompatible_msrv)]

use super::avx2::{fp16x2, hsum_ps, ld128, ld256, rd};
use super::vnni_matvec::{f16_bcast, nibbles_at, BlockAux, Matvec, WeightRows, PREFETCH};
use std::arch::x86_64::*;
#[cfg(test)]
use tessera_tensor::DType;

/// Most activation rows one call takes.
pub(in crate::matmul) const MAX_ROWS: usize = 16;

/// One block of one Q8_0 activation row as the Q8_0-family kernels read it: its bytes plus
/// 128 (unsigned).
#[derive(Clone, Copy)]
#[repr(C, align(32))]
pub(in crate::matmul) struct Biased([u8; 32]);

/// Per-thread room for the prepared activation rows.
#[derive(Default)]
pub(in crate::matmul) struct Scratch {
    /// The values per row.
    n: usize,
    /// The activation rows.
    ys: Vec<*const u8>,
    /// Q8_0 family: each row's block bytes plus 128, block-major (`block · rows + row`).
    yu: Vec<Biased>,
    /// Q8_0 family: each row's block scales as f32, block-major.
    dy: Vec<f32>,
    /// Q4_1 family: each row's [`BlockAux`].
    auxes: Vec<Vec<BlockAux>>,
}

/// The Q8_0-family loop: weight rows against `N` prepared activation rows.
///
/// # Safety
/// `w`'s rows readable (values of the kernel's type); `yu` and `dy` hold `n / 32 · N`
/// prepared blocks; `outs` has `N` entries, each room for `w.count` f32; AVX-512 F/BW/VL/DQ/VNNI, AVX2, FMA, F16C.
pub(in crate::matmul) type SignedFn = unsafe fn(WeightRows, *const Biased, *const f32, &[*mut f32]);

/// Weight rows against `N` Q8_1 activation rows (the Q4_1 family).
///
/// # Safety
/// `w`'s rows readable (values of the kernel's type); `ys`, `auxes`, `outs` with `N`
/// entries: each `ys[j]` a Q8_1 row of `n` values, `auxes[j]` its `n / 32` prepared blocks,
/// `outs[j]` room for `w.count` f32; AVX-512 F/BW/VL/DQ/VNNI, AVX2, FMA, F16C.
pub(in crate::matmul) type Q8_1Fn =
    unsafe fn(WeightRows, &[*const u8], &[*const BlockAux], &[*mut f32]);

/// How a [`Few`] runs.
#[derive(Clone, Copy)]
enum Kind {
    /// Q8_0 family: signed weights, biased activations.
    Signed(SignedFn),
    /// Q4_1 family, with the one-row kernel's preparation.
    Q8_1(Matvec, Q8_1Fn),
}

/// A type's few-rows loops, by row count (the type table names them).
#[derive(Clone, Copy)]
pub(in crate::matmul) enum FewKernels {
    /// The Q8_0 family: the loop for 2..=[`MAX_ROWS`] rows.
    Signed(fn(usize) -> SignedFn),
    /// The Q4_1 family: the loop for 2..=8 rows (`None` beyond).
    Q8_1(fn(usize) -> Option<Q8_1Fn>),
}

/// The few-rows kernel of one weight type and row count.
#[derive(Clone, Copy)]
pub(in crate::matmul) struct Few {
    /// The loop, monomorphized for the row (or pair) count.
    kind: Kind,
    /// The activation rows it takes.
    rows: usize,
}

impl Few {
    /// The kernel for `rows` activation rows from a type's few-rows loops (its
    /// [`FewKernels`], with its matrix-vector kernel `mv`, whose preparation the Q4_1 family
    /// shares), where one exists: the Q8_0 family for 2..=[`MAX_ROWS`] rows, the Q4_1 family
    /// for 2..=8. The CPU must have AVX-512 F/BW/VL/DQ and VNNI.
    pub(in crate::matmul) fn new(kernels: FewKernels, mv: Matvec, rows: usize) -> Option<Few> {
        if !(2..=MAX_ROWS).contains(&rows) {
            return None;
        }
        let kind = match kernels {
            FewKernels::Signed(at) => Kind::Signed(at(rows)),
            FewKernels::Q8_1(at) => Kind::Q8_1(mv, at(rows)?),
        };
        Some(Few { kind, rows })
    }

    /// Prepares the activation rows `ys` (`n` values each: Q8_0, or Q8_1 for the Q4_1
    /// family) in `scratch` for [`Few::run`].
    ///
    /// # Safety
    /// Each `ys[j]` a readable activation row of `n` values of that type, and the rows must
    /// stay readable and unchanged while `scratch` is used; the CPU AVX-512 F/BW/VL/DQ/VNNI.
    pub(in crate::matmul) unsafe fn prepare(
        &self,
        n: usize,
        ys: &[*const u8],
        scratch: &mut Scratch,
    ) {
        let rows = self.rows;
        assert_eq!(ys.len(), rows, "Few::prepare: rows given to a {rows}-row kernel");
        scratch.n = n;
        scratch.ys.clear();
        scratch.ys.extend_from_slice(ys);
        match self.kind {
            // SAFETY: forwarded: `rows` readable Q8_0 rows of n values.
            Kind::Signed(_) => unsafe { prepare_signed(n, ys, scratch) },
            Kind::Q8_1(mv, _) => {
                let auxes = &mut scratch.auxes;
                if auxes.len() < rows {
                    auxes.resize_with(rows, Vec::new);
                }
                for (y, aux) in ys.iter().zip(auxes.iter_mut()) {
                    // SAFETY: forwarded: a readable Q8_1 row of n values.
                    unsafe { mv.prepare(n, *y, aux) };
                }
            }
        }
    }

    /// `outs[j][r] = dot(weight row r, row j)` for `nrows` weight rows at `x`, `nb01` bytes
    /// apart, and the activation rows this kernel [`Few::prepare`]d in `scratch`.
    ///
    /// # Safety
    /// `x` must hold `nrows` readable rows of `scratch`'s `n` values of the kernel's type;
    /// `scratch` prepared by this kernel, its rows still readable; `outs[j]` room for `nrows`
    /// f32; the CPU AVX-512 F/BW/VL/DQ/VNNI.
    pub(in crate::matmul) unsafe fn run(
        &self,
        x: *const u8,
        nb01: usize,
        nrows: usize,
        outs: &[*mut f32],
        scratch: &Scratch,
    ) {
        let (rows, n) = (self.rows, scratch.n);
        assert!(
            outs.len() == rows && scratch.ys.len() == rows,
            "Few::run: {} rows given to a {rows}-row kernel",
            outs.len()
        );
        let w = WeightRows { x, n, stride: nb01, count: nrows };
        match self.kind {
            Kind::Signed(f) => {
                // SAFETY: forwarded; the scratch holds n / 32 · rows prepared blocks.
                unsafe { f(w, scratch.yu.as_ptr(), scratch.dy.as_ptr(), outs) }
            }
            Kind::Q8_1(_, f) => {
                let mut ptrs = [std::ptr::null::<BlockAux>(); MAX_ROWS];
                for (p, aux) in ptrs.iter_mut().zip(&scratch.auxes[..rows]) {
                    assert_eq!(aux.len(), n / 32, "Few::run: aux prepared for another length");
                    *p = aux.as_ptr();
                }
                // SAFETY: forwarded; each aux holds the n / 32 blocks of its row.
                unsafe { f(w, &scratch.ys, &ptrs[..rows], outs) }
            }
        }
    }
}

/// Fills `scratch.yu` and `scratch.dy` with the Q8_0 rows at `ys` (`n` values each),
/// block-major.
///
/// # Safety
/// Each `ys[j]` a readable Q8_0 row of `n` values (`n` a multiple of 32); AVX2, F16C.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn prepare_signed(n: usize, ys: &[*const u8], scratch: &mut Scratch) {
    let (nb, rows) = (n / 32, ys.len());
    scratch.yu.clear();
    scratch.yu.resize(nb * rows, Biased([0; 32]));
    scratch.dy.clear();
    scratch.dy.resize(nb * rows, 0.0);
    let flip = _mm256_set1_epi8(0x80u8 as i8);
    for i in 0..nb {
        for (j, y) in ys.iter().enumerate() {
            let y = y.wrapping_add(34 * i);
            // SAFETY: block i of a Q8_0 row (34 bytes: d, qs[32]); the Biased is 32-byte
            // aligned.
            unsafe {
                let yu = _mm256_xor_si256(ld256(y.add(2)), flip);
                _mm256_store_si256(scratch.yu[i * rows + j].0.as_mut_ptr().cast(), yu);
                scratch.dy[i * rows + j] = super::avx2::fp16(rd::<u16>(y));
            }
        }
    }
}

/// The Q8_0-family loop against `N` prepared activation rows. `unpack(block)` gives a
/// weight block's 32 values as signed bytes; a block's f16 scale is its first two bytes.
///
/// # Safety
/// The [`SignedFn`] contract with `N` rows and `xsize` bytes per weight block.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn signed_loop<const N: usize>(
    w: WeightRows,
    yu: *const Biased,
    dy: *const f32,
    outs: &[*mut f32],
    xsize: usize,
    unpack: impl Fn(*const u8) -> __m256i,
) {
    let WeightRows { x, n, stride: nb01, count: nrows } = w;
    let outs: [*mut f32; N] = arr(outs);
    let zero = _mm256_setzero_si256();
    let c128 = _mm256_set1_epi8(0x80u8 as i8);
    for r in 0..nrows {
        let row = x.wrapping_add(r * nb01);
        let mut acc = [_mm256_setzero_ps(); N];
        for i in 0..n / 32 {
            let b = row.wrapping_add(i * xsize);
            // A hint only: never faults, whatever the address.
            _mm_prefetch::<_MM_HINT_T0>(b.wrapping_add(PREFETCH).cast());
            // SAFETY: block i of weight row r (the contract).
            let (q, dx) = unsafe { (unpack(b), f16_bcast(b)) };
            // Each lane starts from -128·Σq of its four weight bytes.
            let start = _mm256_sub_epi32(zero, _mm256_dpbusd_epi32(zero, c128, q));
            for (j, acc) in acc.iter_mut().enumerate() {
                // SAFETY: block i of prepared row j (the contract); Biased is 32-byte aligned.
                let (yu, dy) = unsafe {
                    (
                        _mm256_load_si256((*yu.add(i * N + j)).0.as_ptr().cast()),
                        _mm256_set1_ps(*dy.add(i * N + j)),
                    )
                };
                let lanes = _mm256_cvtepi32_ps(_mm256_dpbusd_epi32(start, yu, q));
                *acc = _mm256_fmadd_ps(_mm256_mul_ps(dx, dy), lanes, *acc);
            }
        }
        for (j, acc) in acc.iter().enumerate() {
            // SAFETY: r < nrows, the room each output row has.
            unsafe { outs[j].add(r).write(hsum_ps(*acc)) };
        }
    }
}

macro_rules! signed_few {
    ($name:ident, $size:expr, $unpack:expr) => {
        /// Weight rows against `N` prepared activation rows (the [`SignedFn`] loop of one
        /// type).
        ///
        /// # Safety
        /// The [`SignedFn`] contract with `N` rows.
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
        unsafe fn $name<const N: usize>(
            w: WeightRows,
            yu: *const Biased,
            dy: *const f32,
            outs: &[*mut f32],
        ) {
            let unpack = $unpack;
            // SAFETY: forwarded; `unpack` reads one whole block of a weight row.
            unsafe { signed_loop::<N>(w, yu, dy, outs, $size, unpack) }
        }
    };
}

signed_few!(q4_0_few, 18, |b: *const u8| {
    // SAFETY: a whole Q4_0 block (18 bytes: d, qs[16]).
    _mm256_sub_epi8(unsafe { nibbles_at(b.add(2)) }, _mm256_set1_epi8(8))
});
signed_few!(q5_0_few, 22, |b: *const u8| {
    // Value j is nibble j, less 16 where bit j of qh is clear: one masked byte subtraction.
    // SAFETY: a whole Q5_0 block (22 bytes: d, qh[4], qs[16]).
    let (qh, low) = unsafe { (rd::<u32>(b.add(2)), nibbles_at(b.add(6))) };
    _mm256_mask_sub_epi8(low, _cvtu32_mask32(!qh), low, _mm256_set1_epi8(16))
});
signed_few!(iq4_nl_few, 18, |b: *const u8| {
    // SAFETY: a whole IQ4_NL block (18 bytes: d, qs[16]); the table is 16 bytes.
    let (idx, table) = unsafe {
        (nibbles_at(b.add(2)), ld128(tessera_tensor::blocks::KVALUES_IQ4NL.as_ptr().cast()))
    };
    _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(table), idx)
});
signed_few!(q8_0_few, 34, |b: *const u8| {
    // SAFETY: a whole Q8_0 block (34 bytes: d, qs[32]).
    unsafe { ld256(b.add(2)) }
});

/// `s` as an array of `N` pointers.
#[inline(always)]
fn arr<T: Copy, const N: usize>(s: &[T]) -> [T; N] {
    std::array::from_fn(|j| s[j])
}

/// The Q4_1-family loop against `N` Q8_1 activation rows, each in ggml's order:
/// `acc = fma(dx·dy, lanes, acc)` and `summs += mx·sy` per block, then `hsum(acc) + summs`.
///
/// # Safety
/// The [`Q8_1Fn`] contract with `N` rows and `xsize` bytes per block.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn rows_loop_q8_1<const N: usize>(
    w: WeightRows,
    ys: &[*const u8],
    auxes: &[*const BlockAux],
    outs: &[*mut f32],
    xsize: usize,
    unpack: impl Fn(*const u8) -> __m256i,
) {
    let WeightRows { x, n, stride: nb01, count: nrows } = w;
    let (ys, auxes, outs): ([*const u8; N], [*const BlockAux; N], [*mut f32; N]) =
        (arr(ys), arr(auxes), arr(outs));
    let zero = _mm256_setzero_si256();
    for r in 0..nrows {
        let row = x.wrapping_add(r * nb01);
        let mut acc = [_mm256_setzero_ps(); N];
        let mut summs = [0f32; N];
        for i in 0..n / 32 {
            let b = row.wrapping_add(i * xsize);
            // A hint only: never faults, whatever the address.
            _mm_prefetch::<_MM_HINT_T0>(b.wrapping_add(PREFETCH).cast());
            // SAFETY: block i of weight row r (the contract).
            let (q, dm) = unsafe { (unpack(b), rd::<u32>(b)) };
            let (dx, mx) = fp16x2(dm);
            for j in 0..N {
                // SAFETY: block i of the Q8_1 activation row j (36 bytes: d, s, qs[32]) and
                // of its aux (the contract).
                let (qy, dy, sy) = unsafe {
                    let a = auxes[j].add(i);
                    (ld256(ys[j].add(36 * i + 4)), (*a).dy[0], (*a).sy)
                };
                summs[j] += mx * sy;
                let p = _mm256_cvtepi32_ps(_mm256_dpbusd_epi32(zero, q, qy));
                acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(dx * dy), p, acc[j]);
            }
        }
        for j in 0..N {
            // SAFETY: r < nrows, the room each output row has.
            unsafe { outs[j].add(r).write(hsum_ps(acc[j]) + summs[j]) };
        }
    }
}

macro_rules! q8_1_few {
    ($name:ident, $size:expr, $unpack:expr) => {
        /// Weight rows against `N` Q8_1 activation rows (the [`Q8_1Fn`] loop of one type).
        ///
        /// # Safety
        /// The [`Q8_1Fn`] contract with `N` rows.
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
        unsafe fn $name<const N: usize>(
            w: WeightRows,
            ys: &[*const u8],
            auxes: &[*const BlockAux],
            outs: &[*mut f32],
        ) {
            let unpack = $unpack;
            // SAFETY: forwarded; `unpack` reads one whole block of a weight row.
            unsafe { rows_loop_q8_1::<N>(w, ys, auxes, outs, $size, unpack) }
        }
    };
}

q8_1_few!(q4_1_few, 20, |b: *const u8| {
    // SAFETY: a whole Q4_1 block (20 bytes: d, m, qs[16]).
    unsafe { nibbles_at(b.add(4)) }
});
q8_1_few!(q5_1_few, 24, |b: *const u8| {
    // SAFETY: a whole Q5_1 block (24 bytes: d, m, qh[4], qs[16]).
    unsafe { super::vnni_matvec::five_bits(b.add(4), b.add(8)) }
});

/// The loop of one Q8_0-family type for `rows` (2..=[`MAX_ROWS`]) as a [`SignedFn`].
macro_rules! signed_at {
    ($($at:ident = $f:ident;)*) => {$(
        #[doc = concat!("[`", stringify!($f), "`] for `rows` activation rows.")]
        pub(in crate::matmul) fn $at(rows: usize) -> SignedFn {
            match rows {
                2 => $f::<2>,
                3 => $f::<3>,
                4 => $f::<4>,
                5 => $f::<5>,
                6 => $f::<6>,
                7 => $f::<7>,
                8 => $f::<8>,
                9 => $f::<9>,
                10 => $f::<10>,
                11 => $f::<11>,
                12 => $f::<12>,
                13 => $f::<13>,
                14 => $f::<14>,
                15 => $f::<15>,
                _ => $f::<16>,
            }
        }
    )*};
}

signed_at! {
    q4_0_few_at = q4_0_few;
    q5_0_few_at = q5_0_few;
    iq4_nl_few_at = iq4_nl_few;
    q8_0_few_at = q8_0_few;
}

// The Q4_1 family only up to 8 rows: beyond, its 4x8 tiles are as fast or faster (Zen 4,
// SmolLM2: 8 sequences decoding together 263-289 t/s with the tiles, 313-356 through this
// loop; 16 sequences 308-332 and ~300; pp512 443 and 380).
/// The loop of one Q4_1-family type for `rows` (2..=8) as a [`Q8_1Fn`].
macro_rules! q8_1_at {
    ($($at:ident = $f:ident;)*) => {$(
        #[doc = concat!("[`", stringify!($f), "`] for `rows` activation rows (2..=8).")]
        pub(in crate::matmul) fn $at(rows: usize) -> Option<Q8_1Fn> {
            Some(match rows {
                2 => $f::<2>,
                3 => $f::<3>,
                4 => $f::<4>,
                5 => $f::<5>,
                6 => $f::<6>,
                7 => $f::<7>,
                8 => $f::<8>,
                _ => return None,
            })
        }
    )*};
}

q8_1_at! {
    q4_1_few_at = q4_1_few;
    q5_1_few_at = q5_1_few;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The few-rows loops exist for exactly the types with a VNNI matrix-vector kernel:
    /// 2-16 rows, the Q4_1 family 2-8.
    #[test]
    fn kernels_exist_for_the_matvec_types_and_few_rows() {
        let family =
            [DType::Q4_0, DType::Q5_0, DType::Q8_0, DType::IQ4_NL, DType::Q4_1, DType::Q5_1];
        for dtype in DType::ALL {
            let x86 = crate::matmul::types::row(dtype).map(|r| &r.x86);
            let (Some(kernels), Some(mv)) =
                (x86.and_then(|x| x.vnni_few), x86.and_then(|x| x.vnni_matvec))
            else {
                assert!(!family.contains(&dtype), "{dtype}: no few-rows loops");
                assert!(x86.and_then(|x| x.vnni_few).is_none(), "{dtype}: loops without a matvec");
                continue;
            };
            assert!(family.contains(&dtype), "{dtype}");
            assert!(Few::new(kernels, mv, 1).is_none());
            assert!(Few::new(kernels, mv, MAX_ROWS + 1).is_none());
            let most = if matches!(dtype, DType::Q4_1 | DType::Q5_1) { 8 } else { MAX_ROWS };
            for rows in 2..=most {
                assert_eq!(Few::new(kernels, mv, rows).map(|f| f.rows), Some(rows));
            }
            assert!(Few::new(kernels, mv, most + 1).is_none());
        }
    }
}
