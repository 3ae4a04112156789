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
//! The module is cut as ggml-cpu's `arch/` is: the choices (data and pure functions), the
//! loops that carry them out, and the arithmetic.
//!
//! - [`types`]: the type table, one row per weight type naming its activation type (ggml's
//!   `vec_dot_type`) and every kernel it has at every level: the scalar dot; AVX2 one-row,
//!   four-row and 4x4-tile dots; AVX-512 (and AVX512-BF16) dots; VNNI 4x8 tiles,
//!   matrix-vector and few-rows loops; the K-quant tiled layout; llama.cpp's repacking (level,
//!   chains, interleaved shape, group kernels). Kernels are chosen there by weight type and
//!   nowhere else, except the float types' routing to ggml's own dots or tinyBLAS, which
//!   `mul_mat` does as llama.cpp.
//! - [`plan`]: `plan(Weight, Batch, Cpu) -> Path`, the path a product takes (interleaved,
//!   kquant-tiled, vnni-matvec, vnni-few-rows, few-rows, matvec, chunked, dequant) in
//!   llama.cpp's order, read from the table; tested as a table (type × rows × level) and
//!   printed per weight type by `tessera run -v`.
//! - This module and the path modules carry a path out: `mul_mat` here (kernel and plan,
//!   then the path's loop); `activations` (src1 converted once to the dot type) and `convert`
//!   (f32 to the dot types); `chunked` (ggml's 16×16 chunks claimed from a counter, and the
//!   dequantizing loop); `rows` (matrix-vector and few-rows loops); [`kquant_tiled`]
//!   (llama.cpp's tiled order for 8+ rows: unpacked weight rows against bands of 16
//!   activation rows); [`interleaved`] (repacked weights interleaved eight rows to a group,
//!   and the group loop); `layouts` (the byte layouts those two share with their kernels);
//!   [`mul_mat_id`] (MUL_MAT_ID: pairs grouped by expert, per expert llama.cpp's path, no
//!   barrier between experts); `dot_f16` (`ggml_vec_dot_f16`, for one-column F16 products).
//! - `arch/`: the arithmetic only, one folder per architecture (`arch/generic`: ggml's generic
//!   kernels, the scalar level and the yardstick of the others; `arch/x86`: AVX2, AVX-512 and
//!   VNNI bodies, with the helpers they share in `avx2.rs`).
//!
//! Adding a type's fast path is its kernel under `arch/` and its name in the type's row of
//! the table; a new path is a `Path` variant, its condition in [`plan`] and its arm in
//! `mul_mat`.
//!
//! # What the kernels guarantee
//!
//! Every fast kernel of a type gives the f32 bits of the kernel llama.cpp runs for that shape
//! (the type's one-row dot, its repacked chains, or its tiled order), and is chosen by the
//! condition llama.cpp uses (shape, types), never by speed alone: a faster kernel must give
//! the bits of the one it replaces. `matmul/tests.rs` checks each against it, and every
//! type, level and shape against an f64 reference. The paths' speed is measured in
//! docs/BENCHMARKS.md.
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

mod activations;
mod arch;

/// `_mm512_reduce_add_ps`'s lane order, for kernels outside the products (flash attention).
#[cfg(target_arch = "x86_64")]
pub(crate) use arch::x86::avx512::reduce_add;
mod chunked;
mod convert;
pub(crate) mod dot_f16;
#[cfg(target_arch = "x86_64")]
pub(crate) mod interleaved;
#[cfg(target_arch = "x86_64")]
mod kquant_tiled;
#[cfg(target_arch = "x86_64")]
mod kquant_unpack;
mod layouts;
pub(crate) mod mul_mat_id;
pub mod plan;
#[cfg(target_arch = "x86_64")]
mod rows;
mod types;

use activations::{converted_row_size, needs_conversion, Activations};
use chunked::{dequant_chunk, dot_chunk, for_each_chunk};
#[cfg(target_arch = "x86_64")]
use rows::{few_rows, few_rows_vnni, matvec, matvec_rows};

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
pub(crate) type TileFn = unsafe fn(usize, [*const u8; 4], &[*const u8; 8], &[*mut f32; 8]);

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
pub(crate) type FromF32 = unsafe fn(*const f32, *mut u8, usize);

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

/// Bytes of work buffer `mul_mat` needs: all of src1's rows converted to src0's dot type,
/// rounded up to 64 (zero when src1 is used in place), then, for the types the K-quant tiled
/// path may take with 8+ rows, the rows repacked once in its bands.
pub(crate) fn work_size(src0: &TensorRef, src1: &TensorRef) -> usize {
    let vdt = vec_dot_type(src0.dtype);
    if !needs_conversion(src1, vdt) {
        return 0;
    }
    let rows = src1.n_rows();
    let converted = (converted_row_size(vdt, src1.ne[0]) * rows).next_multiple_of(64);
    #[cfg(target_arch = "x86_64")]
    if rows >= 8 {
        return converted + kquant_tiled::bands_size(src0, rows);
    }
    converted
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
        if let (Kernel::Dot { dot, dot4, tile, .. }, Some(tb)) =
            (&mut kernel, dot_f32::tinyblas(avx512, src0.ne[1], src0.ne[0], src1.ne[1]))
        {
            *dot = tb;
            *dot4 = None;
            *tile = dot_f32::tinyblas_tile(avx512).map(|f| Tile { cols: 4, f });
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

/// ggml's CPU `from_float` for `dtype` where it differs from the reference quantizer: Q8_0
/// at AVX2 and above (x86's `quantize_row_q8_0`: multiplier `127/amax`, round-half-even).
/// Stores that quantize ([`crate::ops::rowio::RowStore`]: SET_ROWS, CPY) must write these
/// bytes to give llama.cpp's (a Q8_0 KV cache); the other types' CPU `from_float` is their
/// reference quantizer.
pub(crate) fn cpu_from_float(dtype: DType, simd: SimdLevel) -> Option<FromF32> {
    (dtype == DType::Q8_0).then(|| convert::from_f32(dtype, effective(simd)))
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
