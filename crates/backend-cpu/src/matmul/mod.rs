//! Matrix multiplication: ggml's CPU `MUL_MAT` (`ggml_compute_forward_mul_mat`).
//!
//! `dst[i1][i0] = dot(src0 row i0, src1 row i1)`, with src0 (the weights) broadcast over
//! dimensions 2 and 3. As in ggml, the activations (src1) are first converted once to the
//! weight type's *dot type* ([`vec_dot_type`]: F16 for F16 weights, BF16 for BF16, Q8_0 / Q8_1 /
//! Q8_K for the quantized types, F32 for F32) into the shared work buffer, every thread
//! converting its share; after a barrier the output is cut into chunks that threads claim from
//! a shared counter, and each chunk is computed in 16×16 tiles of dot products.
//!
//! # Where things are
//!
//! - [`types`]: the type table, one row per weight type naming every kernel it has at every
//!   level (its activation type, scalar, AVX2 and AVX-512 dots, VNNI tiles and row loops, the
//!   tiled layout, llama.cpp's repacking). Kernels are chosen there by weight type, except the
//!   float types' routing to ggml's own dots or tinyBLAS, which `mul_mat` does as llama.cpp.
//! - [`plan`]: which path a product takes, a pure function of the weight, the batch and the
//!   CPU, read from the table.
//! - This module and the path modules ([`kquant_tiled`], [`interleaved`], [`mul_mat_id`]):
//!   the loops that carry a path out (chunks, few rows, bands, groups, threads).
//! - `arch/`: the arithmetic, one folder per architecture (`arch/generic`: ggml's generic
//!   kernels, the scalar level; `arch/x86`: AVX2, AVX-512 and VNNI bodies).
//!
//! Every weight type ggml has a dot product for that the models use (F32, F16, BF16, Q4_0,
//! Q4_1, Q5_0, Q5_1, Q8_0, Q2_K..Q6_K, IQ4_NL, IQ4_XS, MXFP4, the grid i-quants, TQ1_0/TQ2_0)
//! has a row; batches of 8+ rows of the K-quants and grid i-quants take llama.cpp's tiled path
//! (its own rounding, at AVX2 and AVX-512 VNNI alike); with AVX-512 VNNI the Q8_0 and Q4_1
//! families take register tiles and row loops that give the one-row kernels' bits. Any other
//! type with a reference dequantizer (the integer and F64 types) is computed by dequantizing
//! tiles of src0 rows to f32 and taking f32 dots with unconverted activations.
//!
//! Bit-level choices follow ggml's x86 build: on the SIMD levels activations are quantized to
//! Q8_0/Q8_1 with `d = amax/127` (stored as f16), multiplier `127/amax` and round-half-even;
//! Q8_K with ggml's reference quantizer (`iscale = -127/max`, `nearest_int`). The scalar level
//! uses ggml's reference quantizers (`roundf`), as a ggml build without AVX does.

mod arch;
mod convert;
pub(crate) mod dot_f16;
#[cfg(target_arch = "x86_64")]
pub(crate) mod interleaved;
#[cfg(target_arch = "x86_64")]
mod kquant_tiled;
pub(crate) mod mul_mat_id;
pub mod plan;
mod types;

use arch::generic::scalar;
#[cfg(target_arch = "x86_64")]
use arch::x86::{avx2, avx512, dot_bf16, dot_f32, vnni_few, vnni_matvec};
/// Horizontal sums in ggml's orders, shared with the element-wise ops.
#[cfg(target_arch = "x86_64")]
pub(crate) use {avx2::hsum_ps, avx512::reduce_add as reduce_add_ps};

#[cfg(test)]
mod tests;

use crate::{ComputeParams, SimdLevel, TensorRef};
use plan::Path;
use std::cell::RefCell;
use std::sync::atomic::Ordering;
use std::sync::OnceLock;
use tessera_tensor::{quant, DType};

/// A dot product of one src0 row with one converted src1 row: `dot(n, x, y)`.
///
/// # Safety
/// `x` must point to `n` elements (`n / block_size` blocks) of the kernel's weight type and `y`
/// to `n` elements of its dot type, both readable (no alignment needed), and the CPU must have
/// the instruction set the kernel was compiled for.
type VecDot = unsafe fn(usize, *const u8, *const u8) -> f32;

/// One src0 row against four src1 rows at once (`y[k]` → result `k`), sharing the weight
/// unpacking between the four; same contract as [`VecDot`] for each `y[k]`.
type VecDot4 = unsafe fn(usize, *const u8, [*const u8; 4]) -> [f32; 4];

/// A register tile: four src0 rows against [`Tile::cols`] src1 rows at once, sharing both
/// the weight unpacking and the activation loads. `f(n, xs, ys, outs)` reads `ys[..cols]` and
/// writes the results of src1 row `c` for the four src0 rows to `outs[c][0..4]` (so `outs[c]`
/// points into dst row `c` at the first src0 row); each result the same bits as [`VecDot`]'s.
/// Same contract as [`VecDot`] for every pair of rows, and `outs[..cols]` must each have room
/// for four f32.
type TileFn = unsafe fn(usize, [*const u8; 4], &[*const u8; 8], &[*mut f32; 8]);

/// A [`TileFn`] and its width.
#[derive(Clone, Copy)]
struct Tile {
    /// src1 rows per call: 4 or 8.
    cols: usize,
    /// The kernel.
    f: TileFn,
}

/// Converts `n` f32 values at `x` to the dot type, written at `y`.
///
/// # Safety
/// `x` must hold `n` readable f32 values (no alignment needed), `y` must have room for the
/// converted row (`n` a multiple of the type's block size), and the CPU must have the
/// kernel's instruction set.
type FromF32 = unsafe fn(*const f32, *mut u8, usize);

/// Tile edge of the inner blocking (ggml's `blck_0`/`blck_1`).
const TILE: usize = 16;

/// How one weight type is multiplied at one SIMD level.
#[derive(Clone, Copy)]
enum Kernel {
    /// A dot product of its own against activations converted to `vdt`.
    Dot {
        /// The activations' type.
        vdt: DType,
        /// One row by one row.
        dot: VecDot,
        /// One row by four rows, where a kernel exists.
        dot4: Option<VecDot4>,
        /// Four rows by four or eight, where a kernel exists.
        tile: Option<Tile>,
    },
    /// Dequantize tiles of src0 rows to f32 and take f32 dots with f32 activations.
    Dequant,
}

/// The activation type ggml converts src1 to for weights of type `src0` (`vec_dot_type`,
/// from the type table); F32 for the types computed by dequantization.
fn vec_dot_type(src0: DType) -> DType {
    types::row(src0).map_or(DType::F32, |r| r.vdt)
}

/// The best level this CPU runs, detected once.
fn cpu_level() -> SimdLevel {
    static LEVEL: OnceLock<SimdLevel> = OnceLock::new();
    *LEVEL.get_or_init(SimdLevel::detect)
}

/// Whether the CPU has AVX-512 VNNI ([`crate::has_vnni`] detects it once).
fn cpu_vnni() -> bool {
    crate::has_vnni()
}

/// `requested`, lowered to what the CPU can run, so a wrong [`ComputeParams::simd`] can never
/// reach an instruction the CPU lacks.
fn effective(requested: SimdLevel) -> SimdLevel {
    requested.min(cpu_level())
}

/// The kernel for weights of type `src0` at level `simd` (which the CPU must support): the
/// type table's best dots for the level.
fn kernel(src0: DType, simd: SimdLevel) -> Kernel {
    let Some(row) = types::row(src0) else {
        return Kernel::Dequant;
    };
    #[allow(unused_mut)]
    let (mut dot, mut dot4, mut tile) = (row.scalar, None, None);
    #[cfg(target_arch = "x86_64")]
    {
        let x86 = &row.x86;
        if let Some(d) = x86.avx2.filter(|_| simd >= SimdLevel::Avx2) {
            (dot, dot4, tile) = (d.one, d.four, d.tile.map(|f| Tile { cols: 4, f }));
        }
        // The block types stay on the AVX2 kernels at AVX-512: llama.cpp multiplies them one
        // 8-lane accumulator per output with blocks in order (tinyBLAS, ggml's dots), which
        // those reproduce bit for bit. One- and four-row kernels always come from the same
        // level, so every result is the same whichever of the two computed it.
        if simd >= SimdLevel::Avx512 {
            let bf16 = x86.avx512_bf16.filter(|_| crate::has_avx512_bf16());
            if let Some(d) = bf16.or(x86.avx512) {
                (dot, dot4, tile) = (d.one, d.four, d.tile.map(|f| Tile { cols: 4, f }));
            }
        }
        // The Q8_0 family's 4x8 tiles need AVX-512 VNNI; they give the AVX2 kernels' bits
        // (see `vnni_tile`), so they pair with those one-row kernels.
        if simd >= SimdLevel::Avx512 && cpu_vnni() {
            tile = x86.vnni_tile.map(|f| Tile { cols: 8, f }).or(tile);
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = simd;
    Kernel::Dot { vdt: row.vdt, dot, dot4, tile }
}

/// `ggml_vec_dot_f16` as a [`VecDot`], at AVX-512 or AVX2 (`AVX512`).
///
/// # Safety
/// The [`VecDot`] contract.
unsafe fn vec_dot_f16<const AVX512: bool>(n: usize, x: *const u8, y: *const u8) -> f32 {
    let level = if AVX512 { SimdLevel::Avx512 } else { SimdLevel::Avx2 };
    // SAFETY: n f16 values at each pointer (the VecDot contract); dot_f16 checks the CPU.
    unsafe { dot_f16::dot(n, x.cast(), y.cast(), level) }
}

/// ggml's own `vec_dot` for the float weights whose kernels here sum in tinyBLAS's order (F16
/// and BF16 at AVX2 and above, as the build that level stands for): what llama.cpp computes
/// one-column products and every MUL_MAT_ID row with. `None` where the type's one-row kernel
/// already is ggml's (F32's is `ggml_vec_dot_f32`, the block types' their `vec_dot`).
fn ggml_vec_dot(src0: DType, simd: SimdLevel) -> Option<VecDot> {
    if simd < SimdLevel::Avx2 {
        return None;
    }
    let avx512 = simd >= SimdLevel::Avx512;
    match src0 {
        DType::F16 => Some(if avx512 { vec_dot_f16::<true> } else { vec_dot_f16::<false> }),
        #[cfg(target_arch = "x86_64")]
        DType::BF16 => Some(dot_bf16::one_column(avx512)),
        _ => None,
    }
}

/// Whether `mul_mat` can multiply weights of type `src0` by activations of type `src1`:
/// every weight type with a reference dequantizer, by F32, F16 or BF16 activations.
pub(crate) fn supports(src0: DType, src1: DType) -> bool {
    matches!(src1, DType::F32 | DType::F16 | DType::BF16)
        && (types::row(src0).is_some() || quant::can_dequantize(src0))
}

/// Whether src1 must be converted into the work buffer before the dots: its type is not the
/// dot type, or its elements are not packed within rows.
fn needs_conversion(src1: &TensorRef, vdt: DType) -> bool {
    src1.dtype != vdt || !src1.rows_contiguous()
}

/// Bytes of one src1 row once converted to `vdt`.
fn converted_row_size(vdt: DType, ne10: usize) -> usize {
    vdt.type_size() * (ne10 / vdt.block_size())
}

/// Bytes of work buffer `mul_mat` needs: all of src1's rows converted to src0's dot type,
/// rounded up to 64; zero when src1 is used in place.
pub(crate) fn work_size(src0: &TensorRef, src1: &TensorRef) -> usize {
    let vdt = vec_dot_type(src0.dtype);
    if !needs_conversion(src1, vdt) {
        return 0;
    }
    (converted_row_size(vdt, src1.ne[0]) * src1.n_rows()).next_multiple_of(64)
}

/// Computes this thread's share of `dst = src0 · src1ᵀ` (ggml's MUL_MAT). Called by all
/// `p.nth` threads at once; they meet at one barrier (after converting src1 into `p.wdata`,
/// which must hold [`work_size`] bytes).
///
/// Shapes: src0 `[K, M, ne02, ne03]` with packed rows, src1 `[K, N, ne12, ne13]` (F32, F16 or
/// BF16, any strides), dst F32 `[M, N, ne12, ne13]` with packed rows; `ne12 % ne02 == 0`,
/// `ne13 % ne03 == 0`. Panics when they do not hold (a graph bug).
pub(crate) fn mul_mat(p: &ComputeParams, dst: &TensorRef, src0: &TensorRef, src1: &TensorRef) {
    check_shapes(dst, src0, src1);
    let simd = effective(p.simd);
    let mut kernel = kernel(src0.dtype, simd);
    // Batch-invariant mode takes the one-column kernels for every batch.
    let one_column = src1.ne[1] == 1 || p.batch_invariant;
    if one_column {
        // llama.cpp hands one-column products to ggml's vec_dot, not to tinyBLAS. Every row
        // goes through it: the wider kernels sum in tinyBLAS's order.
        if let (Some(d), Kernel::Dot { dot, dot4, tile, .. }) =
            (ggml_vec_dot(src0.dtype, simd), &mut kernel)
        {
            (*dot, *dot4, *tile) = (d, None, None);
        }
    }
    // F32 batches take tinyBLAS's order where llama.cpp's MUL_MAT hands them to it; one row
    // (and anything tinyBLAS refuses) stays on ggml_vec_dot_f32.
    #[cfg(target_arch = "x86_64")]
    if src0.dtype == DType::F32 && !one_column && simd >= SimdLevel::Avx2 && src1.is_contiguous() {
        let avx512 = simd >= SimdLevel::Avx512;
        if let (Kernel::Dot { dot, .. }, Some(tb)) =
            (&mut kernel, dot_f32::tinyblas(avx512, src0.ne[1], src0.ne[0], src1.ne[1]))
        {
            *dot = tb;
        }
    }
    let vdt = match kernel {
        Kernel::Dot { vdt, .. } => vdt,
        Kernel::Dequant => DType::F32,
    };
    let act = Activations::prepare(p, src1, vdt, simd);
    let weight = plan::Weight {
        dtype: src0.dtype,
        matrix: src0.ne[2] * src0.ne[3] == 1,
        repacked: src0.repacked,
    };
    let batch =
        plan::Batch { cols: src1.ne[1], rows: src1.n_rows(), batch_invariant: p.batch_invariant };
    #[cfg(target_arch = "x86_64")]
    let vnni = simd >= SimdLevel::Avx512 && cpu_vnni();
    #[cfg(not(target_arch = "x86_64"))]
    let vnni = false;
    match (plan::plan(weight, batch, plan::Cpu { level: simd, vnni }), kernel) {
        // Weights llama.cpp would have repacked take its repacked kernels' arithmetic
        // (`repack`), lane by lane, eight rows per register (`interleaved`).
        #[cfg(target_arch = "x86_64")]
        (Path::Interleaved, _) => interleaved::mul_mat(p, dst, src0, &act, vnni),
        #[cfg(target_arch = "x86_64")]
        (Path::KquantTiled, _) => kquant_tiled::mul_mat(p, dst, src0, &act, vnni),
        #[cfg(target_arch = "x86_64")]
        (Path::VnniMatvec, _) => {
            let mv = types::row(src0.dtype).and_then(|r| r.x86.vnni_matvec);
            let mv = mv.expect("planned for a VNNI matvec type");
            matvec(p, dst, src0, &act, mv)
        }
        // Activation rows against a 2-D weight: with AVX-512 VNNI, the Q8_0 family's few-rows
        // kernels take any number of rows (the Q4_1 family's 2-8), in passes of up to 16 over
        // cached blocks of weight rows (faster than the 4x8 tiles, which give the same bits:
        // Qwen2.5-0.5B pp512 +10%, 8 sequences decoding together +60%, Zen 4). Otherwise 2-7
        // rows (several sequences decoding together) read the weights once through the one- and
        // four-row dots; the tiles take 8 rows and more, as the K-quants must (llama.cpp's tiled
        // order from 8 rows on). All give the chunked loop's bits (tests).
        #[cfg(target_arch = "x86_64")]
        (Path::VnniFewRows, _) => few_rows_vnni(p, dst, src0, &act),
        #[cfg(target_arch = "x86_64")]
        (Path::FewRows, Kernel::Dot { dot, dot4, .. }) => few_rows(p, dst, src0, &act, (dot, dot4)),
        #[cfg(target_arch = "x86_64")]
        (Path::Matvec, Kernel::Dot { dot, .. }) => matvec_rows(p, dst, src0, &act, dot),
        (_, Kernel::Dot { dot, dot4, tile, .. }) => {
            for_each_chunk(p, src0.ne[1], src1.n_rows(), |rows0, rows1| {
                dot_chunk(dst, src0, &act, (dot, dot4, tile), rows0, rows1)
            })
        }
        (_, Kernel::Dequant) => for_each_chunk(p, src0.ne[1], src1.n_rows(), |rows0, rows1| {
            dequant_chunk(dst, src0, &act, simd, rows0, rows1)
        }),
    }
}

/// Cuts `nr0` × `nr1` outputs into chunks (ggml's scheme: 16×16, or 64 rows when either side
/// is one; one range per thread along the longer side when there are too few to balance) and
/// runs `f(rows0, rows1)` on the chunks this thread claims from the shared counter, which
/// `mul_mat` set to `p.nth` before its barrier.
fn for_each_chunk(
    p: &ComputeParams,
    nr0: usize,
    nr1: usize,
    mut f: impl FnMut(std::ops::Range<usize>, std::ops::Range<usize>),
) {
    let chunk = if nr0 == 1 || nr1 == 1 { 64 } else { 16 };
    let (mut nchunk0, mut nchunk1) = (nr0.div_ceil(chunk), nr1.div_ceil(chunk));
    if nchunk0 * nchunk1 < 4 * p.nth {
        // Too few chunks to balance dynamically: one range per thread along the longer side.
        (nchunk0, nchunk1) = if nr0 > nr1 { (p.nth, 1) } else { (1, p.nth) };
    }
    let (dr0, dr1) = (nr0.div_ceil(nchunk0), nr1.div_ceil(nchunk1));
    for_each_claimed(p, nchunk0 * nchunk1, |current| {
        let (c0, c1) = (current % nchunk0, current / nchunk0);
        let rows0 = (dr0 * c0).min(nr0)..(dr0 * (c0 + 1)).min(nr0);
        let rows1 = (dr1 * c1).min(nr1)..(dr1 * (c1 + 1)).min(nr1);
        f(rows0, rows1);
    });
}

/// Runs `f(chunk)` for the chunks of `0..total` this thread claims: chunk `p.ith` first, then
/// the next unclaimed ones from the shared counter (which `mul_mat` set to `p.nth` before its
/// barrier), so a thread that falls behind takes fewer.
fn for_each_claimed(p: &ComputeParams, total: usize, mut f: impl FnMut(usize)) {
    let mut current = p.ith;
    while current < total {
        f(current);
        if p.nth >= total {
            break;
        }
        current = p.sync.chunk_counter().fetch_add(1, Ordering::Relaxed);
    }
}

/// A matrix-vector product (src1 one row) with the VNNI kernels of the Q8_0 and Q4_1
/// families: this thread prepares the activation row's per-block data once, then runs its
/// share of the rows.
#[cfg(target_arch = "x86_64")]
fn matvec(
    p: &ComputeParams,
    dst: &TensorRef,
    src0: &TensorRef,
    act: &Activations,
    mv: vnni_matvec::Matvec,
) {
    thread_local! {
        /// Per-thread activation block data for [`vnni_matvec`].
        static AUX: RefCell<Vec<vnni_matvec::BlockAux>> = const { RefCell::new(Vec::new()) };
    }
    let (k, nb01) = (src0.ne[0], src0.nb[1]);
    let y = act.row(0);
    let out = dst.data.cast::<f32>();
    AUX.with(|cell| {
        let mut aux = cell.borrow_mut();
        // SAFETY: `y` is the converted row (Q8_0 or Q8_1, the kernel's) of k values; the
        // caller checked the CPU.
        unsafe { mv.prepare(k, y, &mut aux) };
        // One contiguous range per thread, not ggml's 64-row chunks claimed in turn: each
        // thread's prefetching then runs ahead into rows it will read itself (tg128, 2
        // threads, medians of 3 interleaved runs: SmolLM2 134 -> 149 t/s, Qwen2.5-0.5B
        // 46.5 -> 47.5, Gemma-3-270M 66 -> 76).
        let nr0 = src0.ne[1];
        let share = |i: usize| nr0 * i / p.nth;
        let rows0 = share(p.ith)..share(p.ith + 1);
        // SAFETY: dst row 0 holds ne0 = src0 rows f32 values; this thread owns `rows0`.
        let out =
            unsafe { std::slice::from_raw_parts_mut(out.wrapping_add(rows0.start), rows0.len()) };
        let x = src0.data.cast_const().wrapping_add(rows0.start * nb01);
        // SAFETY: src0 rows `rows0` (packed, k values each, checked by `check_shapes`),
        // the row `aux` was prepared from, and a CPU with AVX-512 VNNI.
        unsafe { mv.run(k, x, nb01, y, &aux, out) };
    });
}

/// A product of a 2-D weight with 2-7 activation rows through the one- and four-row dots:
/// one contiguous range of weight rows per thread (as [`matvec`]); each weight row, prefetched
/// as in [`matvec_rows`], is multiplied by the activation rows four at a time where the type
/// has a four-row kernel (its unpacking shared by the four), else one at a time while the row
/// is in cache: the weights are read from memory once. The two kernels give the same bits.
#[cfg(target_arch = "x86_64")]
fn few_rows(
    p: &ComputeParams,
    dst: &TensorRef,
    src0: &TensorRef,
    act: &Activations,
    (dot, dot4): (VecDot, Option<VecDot4>),
) {
    let (k, nb01, row) = (src0.ne[0], src0.nb[1], src0.row_size());
    let nr0 = src0.ne[1];
    let n1 = act.src1.ne[1];
    let share = |i: usize| nr0 * i / p.nth;
    // Groups of four activation rows; three left over make a last group that repeats its
    // last row (that fourth result is dropped): one four-row call instead of three single ones.
    // One or two left over stay single: padding those measured slower (Qwen2.5 at the AVX2
    // level, Zen 4, 2 threads, tg64: 3 sequences 66-68 -> 78-86 t/s, 7: 88 -> 96; padding 2
    // and 5 sequences: 67 -> 58 and 98 -> 75).
    let four = match (dot4.is_some(), n1 % 4) {
        (false, _) => 0,
        (true, 3) => n1,
        (true, rest) => n1 - rest,
    };
    let out = |r1: usize| dst.data.wrapping_add(r1 * dst.nb[1]).cast::<f32>();
    for r in share(p.ith)..share(p.ith + 1) {
        let xr = src0.data.cast_const().wrapping_add(r * nb01);
        prefetch_row(xr, row);
        if let Some(dot4) = dot4 {
            for r1 in (0..four).step_by(4) {
                let ys = std::array::from_fn(|j| act.row((r1 + j).min(four - 1)));
                // SAFETY: row r of the 2-D src0 (k values, packed), converted activation rows
                // r1..r1 + 4 (clamped to the last), a level the CPU runs.
                let got = unsafe { dot4(k, xr, ys) };
                for (j, v) in got.into_iter().enumerate().take(four - r1) {
                    // SAFETY: dst row r1 + j < four <= n1 has ne0 = nr0 values; this thread
                    // owns row r.
                    unsafe { out(r1 + j).add(r).write(v) };
                }
            }
        }
        for r1 in four..n1 {
            // SAFETY: row r of the 2-D src0 (k values, packed), converted activation row r1,
            // a level the CPU runs; dst row r1 has ne0 values and this thread owns row r.
            unsafe { out(r1).add(r).write(dot(k, xr, act.row(r1))) };
        }
    }
}

/// Weight rows per block in [`few_rows_vnni`] when the activation rows take several passes:
/// the block stays in L1/L2 while every pass reads it.
#[cfg(target_arch = "x86_64")]
const FEW_ROWS_BLOCK: usize = 32;

/// Chunks of weight rows per thread in [`few_rows_vnni`].
#[cfg(target_arch = "x86_64")]
const FEW_ROWS_CHUNKS: usize = 8;

/// A product of a 2-D weight with 2 or more activation rows through the VNNI few-rows kernels
/// ([`vnni_few`]): the activation rows in passes of at most [`vnni_few::MAX_ROWS`] (sizes as
/// even as can be), each prepared once per thread; chunks of weight rows claimed in turn
/// ([`FEW_ROWS_CHUNKS`] per thread), in blocks of [`FEW_ROWS_BLOCK`] rows that every pass
/// reads while they are in cache (one pass: the whole chunk at once), each weight block
/// unpacked once per pass for all its rows.
#[cfg(target_arch = "x86_64")]
fn few_rows_vnni(p: &ComputeParams, dst: &TensorRef, src0: &TensorRef, act: &Activations) {
    thread_local! {
        /// Per-thread prepared activation rows for [`vnni_few`], one per pass.
        static SCRATCH: RefCell<Vec<vnni_few::Scratch>> = RefCell::default();
    }
    let (k, nb01) = (src0.ne[0], src0.nb[1]);
    let nr0 = src0.ne[1];
    let n1 = act.src1.ne[1];
    let passes = n1.div_ceil(vnni_few::MAX_ROWS);
    let pass_rows = |c: usize| n1 * c / passes..n1 * (c + 1) / passes;
    // Passes have n1 / passes rows or one more: one kernel for each size, no allocation on
    // this (decoding) path.
    let x86 = &types::row(src0.dtype).expect("planned for a few-rows type").x86;
    let (kernels, mv) = (x86.vnni_few, x86.vnni_matvec);
    let kernel = |rows: usize| {
        let few = kernels.zip(mv).and_then(|(k, mv)| vnni_few::Few::new(k, mv, rows));
        few.expect("checked by mul_mat")
    };
    let (short, long) = (kernel(n1 / passes), kernel(n1.div_ceil(passes)));
    let few = |c: usize| if pass_rows(c).len() == n1 / passes { short } else { long };
    SCRATCH.with(|cell| {
        let mut scratch = cell.borrow_mut();
        if scratch.len() < passes {
            scratch.resize_with(passes, Default::default);
        }
        for c in 0..passes {
            let mut ys = [std::ptr::null(); vnni_few::MAX_ROWS];
            for (y, r1) in ys.iter_mut().zip(pass_rows(c)) {
                *y = act.row(r1);
            }
            // SAFETY: the converted activation rows (the kernel's Q8_0 or Q8_1) of k values,
            // unchanged during this product; a CPU with AVX-512 VNNI (the caller).
            unsafe { few(c).prepare(k, &ys[..pass_rows(c).len()], &mut scratch[c]) };
        }
        // Chunks of weight rows claimed in turn (the first one per thread fixed), so a thread
        // that falls behind (a shared, noisy host) does fewer of them instead of making the
        // other wait at the next barrier.
        let chunk = nr0.div_ceil(FEW_ROWS_CHUNKS * p.nth).next_multiple_of(FEW_ROWS_BLOCK);
        for_each_claimed(p, nr0.div_ceil(chunk), |current| {
            let rows0 = chunk * current..(chunk * (current + 1)).min(nr0);
            let block = if passes == 1 { rows0.len().max(1) } else { FEW_ROWS_BLOCK };
            for start in rows0.clone().step_by(block) {
                let end = (start + block).min(rows0.end);
                let x = src0.data.cast_const().wrapping_add(start * nb01);
                for c in 0..passes {
                    let mut outs = [std::ptr::null_mut(); vnni_few::MAX_ROWS];
                    for (o, r1) in outs.iter_mut().zip(pass_rows(c)) {
                        *o =
                            dst.data.wrapping_add(r1 * dst.nb[1]).cast::<f32>().wrapping_add(start);
                    }
                    let outs = &outs[..pass_rows(c).len()];
                    // SAFETY: src0 rows start..end (packed, k values each: `check_shapes`); the
                    // pass's rows prepared above by the same kernel; dst row r1 holds ne0 = nr0
                    // values and this thread owns rows0 (so start..end) of every row; a CPU with
                    // AVX-512 VNNI (the caller).
                    unsafe { few(c).run(x, nb01, end - start, outs, &scratch[c]) };
                }
            }
        });
    });
}

/// Prefetches the `row` bytes [`vnni_matvec::PREFETCH`] past the weight row at `x`, a cache
/// line at a time, so the memory stream keeps ahead of the one-row kernels.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn prefetch_row(x: *const u8, row: usize) {
    let ahead = x.wrapping_add(vnni_matvec::PREFETCH);
    for off in (0..row).step_by(64) {
        // SAFETY: a prefetch is a hint: it never faults, whatever the address.
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                ahead.wrapping_add(off).cast(),
            )
        };
    }
}

/// Rows (bytes) shorter than this are prefetched ahead in [`matvec_rows`]: the window then
/// spans more than one row, which the hardware prefetcher, following one row's stream, does
/// not see coming. Longer rows stream well on their own, and there prefetching cost time
/// (gpt-oss's 2880-wide Q8_0 rows, 3060 bytes: decode 6-17% faster without it; Zen 3, AVX2,
/// 2 threads), while SmolLM2's 360-byte Q4_1 rows gain 8-36% from it.
#[cfg(target_arch = "x86_64")]
const PREFETCH_ROWS_UNDER: usize = 2048;

/// A matrix-vector product (one activation row, a 2-D weight) with a one-row kernel: the
/// threads claim chunks of 64 rows from the shared counter (ggml's chunk size for one
/// activation row), so a thread slowed by a busy core takes fewer, and before each short row a
/// thread prefetches the weight bytes [`vnni_matvec::PREFETCH`] ahead of it, so the memory
/// stream the product waits on stays ahead of the arithmetic. Every output is `dot`'s, so the
/// bits are the chunked loop's.
#[cfg(target_arch = "x86_64")]
fn matvec_rows(
    p: &ComputeParams,
    dst: &TensorRef,
    src0: &TensorRef,
    act: &Activations,
    dot: VecDot,
) {
    const CHUNK: usize = 64;
    let (k, nb01, row) = (src0.ne[0], src0.nb[1], src0.row_size());
    let nr0 = src0.ne[1];
    let y = act.row(0);
    let out = dst.data.cast::<f32>();
    for_each_claimed(p, nr0.div_ceil(CHUNK), |c| {
        for r in CHUNK * c..(CHUNK * (c + 1)).min(nr0) {
            let x = src0.data.cast_const().wrapping_add(r * nb01);
            if row < PREFETCH_ROWS_UNDER {
                prefetch_row(x, row);
            }
            // SAFETY: row r of the 2-D src0 (k values, packed: `check_shapes`), the converted
            // activation row, and a level the CPU runs (`effective`); dst row 0 has ne0 = nr0
            // values and this thread owns row r (its chunk).
            unsafe { out.add(r).write(dot(k, x, y)) };
        }
    });
}

/// Asserts the shape and layout rules of [`mul_mat`].
fn check_shapes(dst: &TensorRef, src0: &TensorRef, src1: &TensorRef) {
    assert_eq!(src0.ne[0], src1.ne[0], "mul_mat: inner dimensions differ");
    assert_eq!(src0.ne[0] % src0.dtype.block_size(), 0, "mul_mat: partial block in src0 rows");
    assert!(src0.rows_contiguous(), "mul_mat: src0 rows must be packed");
    assert!(
        matches!(src1.dtype, DType::F32 | DType::F16 | DType::BF16),
        "mul_mat: src1 must be F32, F16 or BF16, not {}",
        src1.dtype
    );
    assert_eq!(dst.dtype, DType::F32, "mul_mat: dst must be F32");
    assert_eq!(dst.nb[0], 4, "mul_mat: dst rows must be packed");
    assert_eq!(dst.ne, [src0.ne[1], src1.ne[1], src1.ne[2], src1.ne[3]], "mul_mat: dst shape");
    assert!(
        src0.ne[2] > 0
            && src0.ne[3] > 0
            && src1.ne[2] % src0.ne[2] == 0
            && src1.ne[3] % src0.ne[3] == 0,
        "mul_mat: src0 does not broadcast over src1"
    );
}

/// Where the dot kernels find src1 row `(i11, i12, i13)`.
struct Activations {
    /// The work buffer (converted rows, packed) or src1 itself.
    base: *const u8,
    /// src1's shape and strides.
    src1: TensorRef,
    /// Whether `base` is the work buffer.
    converted: bool,
    /// Bytes per converted row.
    row_size: usize,
}

impl Activations {
    /// Converts this thread's share of src1 to `vdt` into the work buffer where it is not
    /// usable as it is, sets the chunk counter to `p.nth`, and meets the other threads at the
    /// barrier: every row is ready when this returns.
    fn prepare(p: &ComputeParams, src1: &TensorRef, vdt: DType, simd: SimdLevel) -> Activations {
        let convert = needs_conversion(src1, vdt);
        let row_size = converted_row_size(vdt, src1.ne[0]);
        if convert {
            assert!(p.wsize >= row_size * src1.n_rows(), "matmul: work buffer too small");
            convert_src1(p, src1, vdt, row_size, simd);
        }
        if p.ith == 0 {
            p.sync.chunk_counter().store(p.nth, Ordering::Relaxed);
        }
        p.sync.barrier();
        Activations {
            base: if convert { p.wdata.cast_const() } else { src1.data.cast_const() },
            src1: *src1,
            converted: convert,
            row_size,
        }
    }

    /// Address of src1 row `r` (a flat row index over dims 1..3).
    fn row(&self, r: usize) -> *const u8 {
        if self.converted {
            self.base.wrapping_add(r * self.row_size)
        } else {
            let (i1, i2, i3) = self.src1.row_coords(r);
            let nb = &self.src1.nb;
            self.base.wrapping_add(i1 * nb[1] + i2 * nb[2] + i3 * nb[3])
        }
    }
}

/// The src0 matrix (dims 2, 3) that src1 row `r` is multiplied by, and the dst row it fills.
fn row_targets(
    dst: &TensorRef,
    src0: &TensorRef,
    src1: &TensorRef,
    r: usize,
) -> (*const u8, *mut f32) {
    if src1.ne[2] == 1 && src1.ne[3] == 1 {
        // One matrix each (the usual case): no index arithmetic.
        return (src0.data.cast_const(), dst.data.wrapping_add(r * dst.nb[1]).cast());
    }
    let (i1, i2, i3) = src1.row_coords(r);
    let (r2, r3) = (src1.ne[2] / src0.ne[2], src1.ne[3] / src0.ne[3]);
    let w = src0.data.wrapping_add((i2 / r2) * src0.nb[2] + (i3 / r3) * src0.nb[3]);
    let out = dst.data.wrapping_add(i1 * dst.nb[1] + i2 * dst.nb[2] + i3 * dst.nb[3]);
    (w.cast_const(), out.cast())
}

/// Computes dst rows `rows1` × columns `rows0` with a dot kernel, in 16×16 tiles. src1 rows
/// go in groups that share their src0 matrix: as wide as the register tile where one exists
/// (four src0 rows per call, the last few by the four-row kernel), else four at a time where
/// a four-row kernel exists, else one.
fn dot_chunk(
    dst: &TensorRef,
    src0: &TensorRef,
    act: &Activations,
    (dot, dot4, tile): (VecDot, Option<VecDot4>, Option<Tile>),
    rows0: std::ops::Range<usize>,
    rows1: std::ops::Range<usize>,
) {
    let (k, nb01) = (src0.ne[0], src0.nb[1]);
    for t1 in rows1.clone().step_by(TILE) {
        let e1 = (t1 + TILE).min(rows1.end);
        // Each src1 row's src0 matrix, converted row and dst row, found once per tile (the
        // index arithmetic divides).
        let mut mats = [std::ptr::null(); TILE];
        let mut ys_all = [std::ptr::null(); TILE];
        let mut outs_all = [std::ptr::null_mut(); TILE];
        for r1 in t1..e1 {
            (mats[r1 - t1], outs_all[r1 - t1]) = row_targets(dst, src0, &act.src1, r1);
            ys_all[r1 - t1] = act.row(r1);
        }
        for t0 in rows0.clone().step_by(TILE) {
            let e0 = (t0 + TILE).min(rows0.end);
            let mut r1 = t1;
            while r1 < e1 {
                let i = r1 - t1;
                let w = mats[i];
                let fits = |g: usize| r1 + g <= e1 && mats[i + g - 1] == w;
                let group = match (tile, dot4) {
                    (Some(t), _) if fits(t.cols) => t.cols,
                    (_, Some(_)) if fits(4) => 4,
                    _ => 1,
                };
                let mut ys = [std::ptr::null(); 8];
                let mut outs = [std::ptr::null_mut(); 8];
                ys[..group].copy_from_slice(&ys_all[i..i + group]);
                outs[..group].copy_from_slice(&outs_all[i..i + group]);
                let mut r0 = t0;
                if let Some(t) = tile.filter(|t| t.cols == group) {
                    while r0 + 4 <= e0 {
                        let x0 = w.wrapping_add(r0 * nb01);
                        let xs = [
                            x0,
                            x0.wrapping_add(nb01),
                            x0.wrapping_add(2 * nb01),
                            x0.wrapping_add(3 * nb01),
                        ];
                        let at = outs.map(|o| o.wrapping_add(r0));
                        // SAFETY: src0 rows r0..r0+4 of matrix `w` and src1 rows r1..r1+group,
                        // as for the dots below; elements r0..r0+4 of those dst rows, which
                        // this thread owns.
                        unsafe { (t.f)(k, xs, &ys, &at) };
                        r0 += 4;
                    }
                }
                for r0 in r0..e0 {
                    let x = w.wrapping_add(r0 * nb01);
                    for (yc, oc) in ys[..group].chunks(4).zip(outs[..group].chunks(4)) {
                        match (dot4, <[*const u8; 4]>::try_from(yc)) {
                            (Some(dot4), Ok(y4)) => {
                                // SAFETY: src0 row r0 of matrix `w` and these src1 rows are
                                // within their tensors, each holding `k` elements of the
                                // kernel's types (checked by `check_shapes` / the conversion),
                                // and `kernel` picked a level this CPU runs.
                                let v = unsafe { dot4(k, x, y4) };
                                for (o, v) in oc.iter().zip(v) {
                                    // SAFETY: r0 < ne0 of the dst row; this thread owns it.
                                    unsafe { o.add(r0).write(v) };
                                }
                            }
                            _ => {
                                for (&y, o) in yc.iter().zip(oc) {
                                    // SAFETY: as above, for one src1 row.
                                    let v = unsafe { dot(k, x, y) };
                                    // SAFETY: r0 < ne0 of the dst row; this thread owns it.
                                    unsafe { o.add(r0).write(v) };
                                }
                            }
                        }
                    }
                }
                r1 += group;
            }
        }
    }
}

thread_local! {
    /// Per-thread f32 scratch: src1 slices gathered before conversion.
    static GATHER: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    /// Per-thread f32 scratch: dequantized src0 tiles.
    static TILE_F32: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` on `n` floats of a per-thread scratch buffer.
fn with_scratch<R>(
    key: &'static std::thread::LocalKey<RefCell<Vec<f32>>>,
    n: usize,
    f: impl FnOnce(&mut [f32]) -> R,
) -> R {
    key.with(|cell| {
        let mut v = cell.borrow_mut();
        if v.len() < n {
            v.resize(n, 0.0);
        }
        f(&mut v[..n])
    })
}

/// Computes a chunk for a weight type without a dot kernel: each tile of up to 16 src0 rows
/// is dequantized to f32 once per src0 matrix, then dotted with the f32 src1 rows.
fn dequant_chunk(
    dst: &TensorRef,
    src0: &TensorRef,
    act: &Activations,
    simd: SimdLevel,
    rows0: std::ops::Range<usize>,
    rows1: std::ops::Range<usize>,
) {
    let (k, nb01) = (src0.ne[0], src0.nb[1]);
    let row_bytes = src0.row_size();
    let dot = kernel(DType::F32, simd);
    let Kernel::Dot { dot, .. } = dot else { unreachable!("F32 has a dot kernel") };
    with_scratch(&TILE_F32, TILE * k, |tile| {
        for t1 in rows1.clone().step_by(TILE) {
            let e1 = (t1 + TILE).min(rows1.end);
            for t0 in rows0.clone().step_by(TILE) {
                let e0 = (t0 + TILE).min(rows0.end);
                let mut cached: Option<*const u8> = None;
                for r1 in t1..e1 {
                    let (w, out) = row_targets(dst, src0, &act.src1, r1);
                    if cached != Some(w) {
                        for (r0, f) in (t0..e0).zip(tile.chunks_exact_mut(k)) {
                            // SAFETY: src0 row r0 of matrix `w` is `row_bytes` readable bytes.
                            let bytes = unsafe {
                                std::slice::from_raw_parts(w.wrapping_add(r0 * nb01), row_bytes)
                            };
                            quant::dequantize_row(src0.dtype, bytes, f)
                                .expect("dequantizable type (checked by supports) and exact sizes");
                        }
                        cached = Some(w);
                    }
                    let y = act.row(r1);
                    for (r0, f) in (t0..e0).zip(tile.chunks_exact(k)) {
                        // SAFETY: `f` holds k floats, `y` is an f32 src1 row of k elements,
                        // and the kernel's level runs on this CPU.
                        let v = unsafe { dot(k, f.as_ptr().cast(), y) };
                        // SAFETY: r0 < ne0 of the dst row; this thread owns the element.
                        unsafe { out.add(r0).write(v) };
                    }
                }
            }
        }
    });
}

/// This thread's share of converting src1 into the work buffer: the (row, block) pairs of
/// src1 are split evenly over the threads, so one long row is shared as well as many short.
fn convert_src1(p: &ComputeParams, src1: &TensorRef, vdt: DType, row_size: usize, simd: SimdLevel) {
    let from = convert::from_f32(vdt, simd);
    let (bs, ts) = (vdt.block_size(), vdt.type_size());
    let blocks = src1.ne[0] / bs;
    let total = blocks * src1.n_rows();
    let share = |i: usize| ((total as u128 * i as u128) / p.nth as u128) as usize;
    let (mut at, end) = (share(p.ith), share(p.ith + 1));
    let direct = src1.dtype == DType::F32 && src1.rows_contiguous();
    while at < end {
        let (row, b0) = (at / blocks, at % blocks);
        let nblk = (blocks - b0).min(end - at);
        let (i1, i2, i3) = src1.row_coords(row);
        let n = nblk * bs;
        let out = p.wdata.wrapping_add(row * row_size + b0 * ts);
        // SAFETY: (i1, i2, i3) is a row of src1.
        let src = unsafe { src1.row_ptr(i1, i2, i3) }.wrapping_add(b0 * bs * src1.nb[0]);
        if direct {
            // SAFETY: `src` holds n packed f32 of this row; `out` is this thread's part of the
            // work buffer (checked to hold every converted row); the level runs on this CPU.
            unsafe { from(src.cast(), out, n) };
        } else {
            with_scratch(&GATHER, n, |buf| {
                gather_f32(src, src1.dtype, src1.nb[0], buf);
                // SAFETY: `buf` holds n f32; `out` as above.
                unsafe { from(buf.as_ptr(), out, n) };
            });
        }
        at += nblk;
    }
}

/// Reads `buf.len()` F32/F16/BF16 elements `stride` bytes apart from `src` as f32.
fn gather_f32(src: *const u8, dtype: DType, stride: usize, buf: &mut [f32]) {
    for (i, v) in buf.iter_mut().enumerate() {
        let at = src.wrapping_add(i * stride);
        // SAFETY: element i of the slice `convert_src1` computed, inside src1.
        *v = unsafe {
            match dtype {
                DType::F16 => half::f16::from_bits(at.cast::<u16>().read_unaligned()).to_f32(),
                DType::BF16 => f32::from_bits(u32::from(at.cast::<u16>().read_unaligned()) << 16),
                _ => at.cast::<f32>().read_unaligned(),
            }
        };
    }
}

/// Dot product of `n` f16 values at `x` and `y` with f32 accumulation, at level `simd` (or
/// the best the CPU has, if lower): the F16 matmul kernel alone, for the kernel tests.
///
/// The caller must pass pointers to `n` readable values each (no alignment needed).
#[cfg(test)]
pub(crate) fn dot_f16(n: usize, x: *const half::f16, y: *const half::f16, simd: SimdLevel) -> f32 {
    let Kernel::Dot { dot, .. } = kernel(DType::F16, effective(simd)) else {
        unreachable!("F16 has a dot kernel")
    };
    // SAFETY: the caller passes n readable f16 at each pointer; the level runs on this CPU.
    unsafe { dot(n, x.cast(), y.cast()) }
}

/// Dot product of `n` f32 values at `x` and `y`, at level `simd` (or the best the CPU has, if
/// lower): the F32 matmul kernel alone, for the kernel tests.
///
/// The caller must pass pointers to `n` readable values each (no alignment needed).
#[cfg(test)]
pub(crate) fn dot_f32(n: usize, x: *const f32, y: *const f32, simd: SimdLevel) -> f32 {
    let Kernel::Dot { dot, .. } = kernel(DType::F32, effective(simd)) else {
        unreachable!("F32 has a dot kernel")
    };
    // SAFETY: the caller passes n readable f32 at each pointer; the level runs on this CPU.
    unsafe { dot(n, x.cast(), y.cast()) }
}

/// A row dot product for another kernel's use (flash attention's K·Q): the activation type
/// f32 rows must be converted to, the conversion, and the dot.
#[derive(Clone, Copy)]
pub(crate) struct RowDot {
    /// The type the f32 operand is converted to.
    pub vdt: DType,
    from: FromF32,
    dot: VecDot,
}

impl RowDot {
    /// The kernel for rows of type `x` at level `simd` (lowered to what the CPU has); `None`
    /// for types computed by dequantization.
    pub(crate) fn new(x: DType, simd: SimdLevel) -> Option<RowDot> {
        let simd = effective(simd);
        match kernel(x, simd) {
            Kernel::Dot { vdt, dot, .. } => {
                Some(RowDot { vdt, from: convert::from_f32(vdt, simd), dot })
            }
            Kernel::Dequant => None,
        }
    }

    /// Bytes of `n` converted values.
    pub(crate) fn converted_size(&self, n: usize) -> usize {
        converted_row_size(self.vdt, n)
    }

    /// Converts `x` (a whole number of the dot type's blocks) into `out`.
    pub(crate) fn convert(&self, x: &[f32], out: &mut [u8]) {
        assert!(out.len() >= self.converted_size(x.len()), "RowDot::convert: output too small");
        // SAFETY: x holds n floats, out has room for the converted row (checked), and the
        // level was lowered to one this CPU runs.
        unsafe { (self.from)(x.as_ptr(), out.as_mut_ptr(), x.len()) }
    }

    /// `dot(x row, converted y)` over `n` elements.
    ///
    /// # Safety
    /// `x` must point to a readable row of `n` elements of the kernel's type and `y` to a row
    /// converted by [`RowDot::convert`] from `n` floats.
    pub(crate) unsafe fn dot(&self, n: usize, x: *const u8, y: *const u8) -> f32 {
        // SAFETY: forwarded contract; the level runs on this CPU.
        unsafe { (self.dot)(n, x, y) }
    }
}
