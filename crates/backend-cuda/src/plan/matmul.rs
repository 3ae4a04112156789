//! The path of a matrix product (MUL_MAT): the generic strided kernel for every shape, or a
//! matrix-vector kernel of the weight type's row in [`crate::types`] where the shape is a few
//! contiguous columns and the path is allowed ([`Paths`]).
//!
//! The order is llama.cpp's: int8 MMVQ for 1 to 8 columns where the type has it (and the
//! device has dp4a, sm_61+), int8 tensor-core MMQ for 9 to [`MMQ_MAX_COLUMNS`] columns of the
//! same types (sm_80+; more columns too where cuBLAS is missing), the float matrix-vector
//! kernels for 1 to 8 columns of F16, BF16 or F32 weights, cuBLAS for more than 8 columns
//! (every type the backend reads, converted to F16 first unless F16 already), else the generic
//! kernel (views, broadcasts, batches of matrices).
//!
//! MMQ reads the quantized weights once per 32 columns where the cuBLAS path first writes and
//! reads an F16 copy of the whole matrix (4.5 bytes a weight for 0.56 of Q4_0): it wins on the
//! small batches of serving and speculative verification. Where a prompt's batch is large the
//! F16 tensor cores' rate wins instead; the crossover is a guess until measured on a GPU
//! (`TESSERA_CUDA_PATHS=-mmq` against the default).

use super::{Capability, FastPath, Paths, GRID_YZ_MAX};
use crate::types::row_of;
use tessera_tensor::graph::TensorDesc;
use tessera_tensor::DType::{self, F16, F32};

/// The path of one product.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MatmulPath {
    /// `mul_mat_op`: one warp per output element over strided, dequantized-per-element
    /// sources; every shape, view and broadcast. The baseline behind every other path.
    Generic,
    /// The activation column quantized to Q8_1 (`quantize_q8_1`, into scratch), then the
    /// type's int8 kernel (`mmvq_*`), one warp per weight row.
    Mmvq,
    /// `mmv_f16`/`mmv_bf16`/`mmv_f32`: float weights times 1-8 f32 columns, each weight read
    /// once for all columns.
    Mmv,
    /// Weights (unless contiguous F16) and activations converted to F16 in scratch
    /// (`cpy_op`), then `cublasGemmEx` with F32 accumulation into the F32 destination.
    Gemm,
    /// The columns quantized to Q8_1 (as for MMVQ), then the type's int8 tensor-core kernel
    /// (`mmq_*`): blocks of 64 weight rows by 32 columns, `mma.sync` s8 x s8.
    Mmq,
}

impl MatmulPath {
    /// A short name (`generic`, `mmvq`, ...), as `TESSERA_CUDA_PATHS` spells the fast ones.
    pub fn name(self) -> &'static str {
        match self {
            MatmulPath::Generic => "generic",
            MatmulPath::Mmvq => FastPath::Mmvq.name(),
            MatmulPath::Mmv => FastPath::Mmv.name(),
            MatmulPath::Gemm => FastPath::Gemm.name(),
            MatmulPath::Mmq => FastPath::Mmq.name(),
        }
    }
}

impl std::fmt::Display for MatmulPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Most activation columns the int8 matrix-vector kernels take (`acc[8]` in `mmvq_*`).
pub const MMVQ_MAX_COLUMNS: usize = 8;

/// Most activation columns the plan gives the int8 tensor-core kernels where cuBLAS is there
/// (see the module docs; a guess until measured).
pub const MMQ_MAX_COLUMNS: usize = 128;
/// Weight rows of one MMQ block (`MMQ_ROWS` in `kernels/mmq.cu`).
pub const MMQ_ROWS: usize = 64;
/// Columns of one MMQ block (`MMQ_COLS`).
pub const MMQ_COLS: usize = 32;
/// Threads of one MMQ block (`MMQ_THREADS`: four warps of 16 rows each).
pub const MMQ_THREADS: u32 = 128;
/// Q8_1 blocks (32 values) an MMQ block stages per pass (`MMQ_KB`).
pub const MMQ_KB: usize = 8;
/// Blocks an MMQ launch aims at (about four per SM of a 132-SM H100/H200): fewer row and
/// column blocks than this split K among more (each weight byte in flight in one of them).
pub const MMQ_TARGET_BLOCKS: usize = 512;
/// Most shares K is split into.
pub const MMQ_MAX_SPLITS: usize = 16;

/// How an MMQ product splits K: `splits` shares of `kper` Q8_1 blocks (the last may be
/// shorter), the shares' sums in the node's scratch (`scratch` bytes) where there are several.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MmqSplit {
    /// Shares of K (1: none, the kernel writes the output).
    pub splits: usize,
    /// Q8_1 blocks per share (a multiple of [`MMQ_KB`]).
    pub kper: usize,
    /// Scratch bytes for the shares' sums (0 for one share).
    pub scratch: usize,
}

/// The split of `rows` weight rows of `nblocks` Q8_1 blocks times `cols` columns: enough
/// blocks in the launch to keep every SM streaming weights (small batches of few rows), each
/// share at least one pass.
pub fn mmq_split(rows: usize, cols: usize, nblocks: usize) -> MmqSplit {
    let base = rows.div_ceil(MMQ_ROWS) * cols.div_ceil(MMQ_COLS);
    let passes = nblocks.div_ceil(MMQ_KB).max(1);
    let want = MMQ_TARGET_BLOCKS.div_ceil(base).clamp(1, MMQ_MAX_SPLITS.min(passes));
    let kper = passes.div_ceil(want) * MMQ_KB;
    let splits = nblocks.div_ceil(kper).max(1);
    let scratch = if splits > 1 { splits * rows * cols * 4 } else { 0 };
    MmqSplit { splits, kper, scratch }
}

/// Where the `gemm` path's F16 copies lie in the node's own scratch: the weights' (empty for
/// contiguous F16 weights, which cuBLAS reads in place) at 0, the activations' at `x_offset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GemmScratch {
    /// Bytes of the weights' F16 copy (0: none).
    pub w_bytes: usize,
    /// Offset of the activations' F16 copy (256-byte aligned).
    pub x_offset: usize,
    /// Bytes of the whole region.
    pub total: usize,
}

/// The `gemm` path's scratch for `w` (`k` x `m`) times `cols` columns.
pub fn gemm_scratch(w: &TensorDesc, cols: usize) -> GemmScratch {
    let (k, m) = (w.ne[0], w.ne[1]);
    let in_place = w.dtype == F16 && w.nb[1] == w.row_size();
    let w_bytes = if in_place { 0 } else { k * m * 2 };
    let x_offset = w_bytes.next_multiple_of(256);
    GemmScratch { w_bytes, x_offset, total: x_offset + k * cols * 2 }
}

/// Warps that share one weight row in the int8 matrix-vector kernels (`mmvq_*`, their GLU and
/// group forms) for rows of `nblocks` 32-value blocks: enough that each warp's share is at most
/// one unrolled round of four loads a lane (32 blocks), so a long row's loads are in flight
/// together on several warps instead of in dependent rounds on one (a power of two, at most a
/// block's 8 warps). Depends on the row length alone, so a column's sums are the same for
/// every column count.
pub fn mmvq_warps_per_row(nblocks: usize) -> usize {
    (nblocks / 32).max(1).next_power_of_two().min(8)
}

/// Whether the product is `cols` contiguous f32 columns (one after the other) into contiguous
/// f32 columns, against one weight matrix whose elements (blocks) are packed within each row:
/// what the matrix-vector kernels index (raw pointers, a row stride, a column stride).
fn columns(w: &TensorDesc, x: &TensorDesc, dst: &TensorDesc, cols: usize) -> bool {
    let fits = |n: usize| n < i32::MAX as usize;
    x.dtype == F32
        && x.ne[1] == cols
        && x.ne[2] * x.ne[3] == 1
        && x.nb[0] == 4
        && (cols == 1 || x.nb[1] == 4 * x.ne[0])
        && dst.dtype == F32
        && dst.nb[0] == 4
        && dst.nb[1] % 4 == 0
        && dst.ne[2] * dst.ne[3] == 1
        && w.ne[2] == 1
        && w.ne[3] == 1
        && w.nb[0] == w.dtype.type_size()
        && w.nb[1] >= w.row_size()
        && fits(w.ne[0])
        && fits(w.ne[1])
}

/// The path of `dst = w · x` (see the module docs) and the scratch bytes it needs of its own
/// (the int8 path's Q8_1 input is placed by [`super::share_q8_1`] instead).
pub fn matmul_path(
    w: &TensorDesc,
    x: &TensorDesc,
    dst: &TensorDesc,
    cap: Capability,
    paths: Paths,
) -> (MatmulPath, usize) {
    let Some(row) = row_of(w.dtype) else { return (MatmulPath::Generic, 0) };
    let cols = x.ne[1];
    if row.mmvq.is_some()
        && paths.allows(FastPath::Mmvq)
        && cap.arch >= 61
        && (1..=MMVQ_MAX_COLUMNS).contains(&cols)
        && columns(w, x, dst, cols)
    {
        return (MatmulPath::Mmvq, 0);
    }
    if row.mmq.is_some()
        && paths.allows(FastPath::Mmq)
        && cap.arch >= 80
        && cols > MMVQ_MAX_COLUMNS
        && (cols <= MMQ_MAX_COLUMNS || !cap.cublas || !paths.allows(FastPath::Gemm))
        && columns(w, x, dst, cols)
    {
        return (MatmulPath::Mmq, mmq_split(w.ne[1], cols, w.ne[0] / 32).scratch);
    }
    if cols > MMVQ_MAX_COLUMNS
        && paths.allows(FastPath::Gemm)
        && cap.cublas
        && columns(w, x, dst, cols)
        && dst.nb[1] == 4 * dst.ne[0]
    {
        return (MatmulPath::Gemm, gemm_scratch(w, cols).total);
    }
    if row.mmv.is_some()
        && paths.allows(FastPath::Mmv)
        && (1..=MMVQ_MAX_COLUMNS).contains(&cols)
        && columns(w, x, dst, cols)
    {
        return (MatmulPath::Mmv, 0);
    }
    (MatmulPath::Generic, 0)
}

/// Every path the plan can give a product with weights of `dtype` (on a device with dp4a):
/// what the test matrix must reach for each type.
pub fn possible_paths(dtype: DType) -> Vec<MatmulPath> {
    let mut v = vec![MatmulPath::Generic];
    let Some(row) = row_of(dtype) else { return v };
    if row.mmvq.is_some() {
        v.push(MatmulPath::Mmvq);
    }
    if row.mmv.is_some() {
        v.push(MatmulPath::Mmv);
    }
    if row.mmq.is_some() {
        v.push(MatmulPath::Mmq);
    }
    v.push(MatmulPath::Gemm);
    v
}

/// The path of an expert product (MUL_MAT_ID).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MoePath {
    /// `mul_mat_id_op` (moe.cu): one warp per output element, any layout.
    Generic,
    /// The activations quantized to Q8_1 (`quantize_q8_1`, into the node's scratch), then the
    /// type's `mmvq_id_*`: one warp per weight row of each (slot, token)'s expert.
    Mmvq,
    /// For batches: the activations to Q8_1, the (slot, token) pairs grouped by expert on the
    /// device (`moe_group_pairs`), then the type's `mmq_id_*`: each expert's pairs through the
    /// int8 tensor cores, 32 at a time.
    Mmq,
}

impl MoePath {
    /// A short name (`generic`, `mmvq`, `mmq`).
    pub fn name(self) -> &'static str {
        match self {
            MoePath::Generic => "generic",
            MoePath::Mmvq => FastPath::Mmvq.name(),
            MoePath::Mmq => FastPath::Mmq.name(),
        }
    }
}

/// Most (slot, token) pairs one `mmvq_id_*` launch takes (its grid's second dimension).
pub const MMVQ_ID_MAX_PAIRS: usize = GRID_YZ_MAX;

/// The path of `dst = as[ids] · b` (experts `as` `[K, M, n_expert]`, activations `b` `[K, nb,
/// n_tokens]`, ids `[n_used, n_tokens]`) and its scratch bytes (the int8 path's Q8_1
/// activations).
pub fn mul_mat_id_path(
    w: &TensorDesc,
    b: &TensorDesc,
    ids: &TensorDesc,
    dst: &TensorDesc,
    cap: Capability,
    paths: Paths,
) -> (MoePath, usize) {
    let Some(row) = row_of(w.dtype) else { return (MoePath::Generic, 0) };
    let (k, nb, n_tokens, n_used) = (b.ne[0], b.ne[1], b.ne[2], ids.ne[0]);
    let contiguous = b.dtype == F32
        && b.nb[0] == 4
        && b.nb[1] == 4 * k
        && b.nb[2] == 4 * k * nb
        && ids.nb[0] == 4
        && dst.nb[0] == 4
        && dst.nb[1] == 4 * dst.ne[0]
        && dst.nb[2] == dst.nb[1] * dst.ne[1]
        && w.nb[0] == w.dtype.type_size()
        && w.nb[1] >= w.row_size()
        && w.nb[2] >= w.nb[1] * w.ne[1];
    let fits = |n: usize| n < i32::MAX as usize;
    let n_pairs = n_used * n_tokens;
    if row.mmq_id.is_some()
        && paths.allows(FastPath::Mmq)
        && cap.arch >= 80
        && contiguous
        && k % 32 == 0
        && n_tokens > MMVQ_MAX_COLUMNS
        && n_pairs.div_ceil(MMQ_COLS) <= GRID_YZ_MAX
        && w.ne[2] <= GRID_YZ_MAX
        && fits(n_pairs + 2 * w.ne[2] + 1)
        && fits(w.ne[1])
        && fits(k)
    {
        return (MoePath::Mmq, moe_mmq_scratch(k, nb, n_tokens, n_used, w.ne[2]).total);
    }
    if row.mmvq_id.is_some()
        && paths.allows(FastPath::Mmvq)
        && cap.arch >= 61
        && contiguous
        && k % 32 == 0
        && n_used * n_tokens <= MMVQ_ID_MAX_PAIRS
        && fits(w.ne[1])
        && fits(k)
    {
        return (MoePath::Mmvq, k / 32 * nb * n_tokens * crate::types::Q8_1_BYTES);
    }
    (MoePath::Generic, 0)
}

/// Where MUL_MAT_ID's `mmq` path keeps its data in the node's scratch: the Q8_1 activations
/// at 0, the expert groups (`moe_group_pairs`: offsets, pair list, counters) at
/// `groups_offset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MoeMmqScratch {
    /// Offset of the groups (256-byte aligned).
    pub groups_offset: usize,
    /// Bytes of the whole region.
    pub total: usize,
}

/// The `mmq` expert path's scratch for activations of `k` values, `nb` rows per token,
/// `n_tokens` tokens, `n_used` experts a token of `n_expert`.
pub fn moe_mmq_scratch(
    k: usize,
    nb: usize,
    n_tokens: usize,
    n_used: usize,
    n_expert: usize,
) -> MoeMmqScratch {
    let q8 = k / 32 * nb * n_tokens * crate::types::Q8_1_BYTES;
    let groups_offset = q8.next_multiple_of(256);
    let groups = (2 * n_expert + 1 + n_used * n_tokens) * 4;
    MoeMmqScratch { groups_offset, total: groups_offset + groups }
}

/// Every path the plan can give an expert product with weights of `dtype`.
pub fn possible_moe_paths(dtype: DType) -> Vec<MoePath> {
    let mut v = vec![MoePath::Generic];
    if row_of(dtype).is_some_and(|r| r.mmvq_id.is_some()) {
        v.push(MoePath::Mmvq);
    }
    if row_of(dtype).is_some_and(|r| r.mmq_id.is_some()) {
        v.push(MoePath::Mmq);
    }
    v
}
