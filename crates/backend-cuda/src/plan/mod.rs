//! What runs each node: one pure function of the node, its sources, the device's capability
//! and the allowed fast paths ([`plan_node`]), so the choice can be read, tested as a table
//! without a GPU and printed, apart from the kernels that carry it out. `supports_op` is
//! "the plan has a kernel" and the executor launches what the plan says: the two cannot
//! disagree.
//!
//! A node's plan is its kernel, the matrix-product path (per weight type × columns × device)
//! or attention path it takes, and the scratch bytes it needs; a refusal says why (types,
//! shapes), and the scheduler keeps the node on the CPU.
//!
//! # The paths
//!
//! Every node has a generic kernel (`kernels/ops.cu`, the expert ops in `kernels/moe.cu`:
//! strided, weights dequantized per element), the correctness baseline; decoding with
//! attention sinks takes the prompt or the generic attention kernel. The fast paths, in
//! llama.cpp's order where it has one:
//!
//! - `mmvq`: products of 1-8 contiguous columns with int8 MMVQ kernels for the types whose row
//!   in [`crate::types`] names one (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, MXFP4, Q2_K, Q3_K,
//!   Q4_K, Q5_K, Q6_K, IQ4_XS), on devices with dp4a; each input is quantized to Q8_1 once for
//!   all its products (`activations.rs`).
//! - `mmvq` also takes MUL_MAT_ID's expert products of those types (`mmvq_id_*`: the
//!   expert of each (slot, token) read from the ids on the device), any number of tokens.
//! - `mmv`: products of 1-8 contiguous columns with F16, BF16 or F32 weights, matrix-vector
//!   kernels reading each weight once for all columns (`mmv.cu`, 16-byte loads).
//! - `mmq`: products of 9 to `MMQ_MAX_COLUMNS` contiguous columns (any number where cuBLAS is
//!   missing) with the MMVQ types' int8 tensor-core kernels (`mmq.cu`, `mma.sync` s8, sm_80+),
//!   the same shared Q8_1 activations; each weight block read once per 32 columns, K split
//!   where the launch would be small (`mmq_split`). MUL_MAT_ID's batches (more than 8 tokens)
//!   too: the pairs grouped by expert on the device, each expert's through `mmq_id_*`.
//! - `gemm`: products of more than 8 contiguous columns through cuBLAS (`cublasGemmEx`, F16
//!   inputs, F32 accumulation and output): the weights converted to F16 in scratch unless
//!   they are F16 already, the activations too (llama.cpp's cuBLAS path).
//! - `fattn-mma`: prompt attention over F16 caches on sm_80+ (head sizes a multiple of 16 up
//!   to 128, sinks, soft-cap, ALiBi too): 64 query rows of a head per block, scores and P V on
//!   the f16 tensor cores (`fattn_mma.cu`).
//! - `fattn-tile`: the other prompt attention (more rows than decoding, head sizes up to 128,
//!   sinks too): 16 query rows of a head per block over K/V tiles in shared memory, a lane per
//!   cell.
//! - `fattn-mma-dec`: decode attention over F16 caches on sm_80+: a block of four warps per 16
//!   query rows of the heads sharing a KV head and chunk of 64 cells on the f16 tensor cores
//!   (each warp its own tiles of 16 cells, the warps' states merged), each K/V byte read once
//!   for all those rows.
//! - `fattn-vec`: the other decode attention (at most `ATTN_VEC_MAX_ROWS` query rows per
//!   sequence) split over the KV cells in chunks, the chunks' partials merged after (flash
//!   decoding).
//! - `mmvq-split`: the `mmvq` kernels' long rows split over several warps
//!   ([`mmvq_warps_per_row`]).
//! - `fused`: [`fusion_windows`] finds the runs of nodes one fused kernel computes (the norms,
//!   writing their products' Q8_1 blocks too; gate/up with their GLU, writing the down
//!   projection's; Q, K and V of one
//!   column; K's RoPE into the cache and a step's attention inputs: `fusion.rs` lists them),
//!   with the unfused nodes' arithmetic.
//! - `pdl`: on sm_90+, a kernel right after another in a list is launched early
//!   (programmatic dependent launch, `launch.rs`): it prefetches its weights and waits for the
//!   previous grid in `pdl_start()`.
//! - `graphs`: a step whose resolved launches equal the previous one's is replayed from a
//!   captured CUDA graph (the executor's, `exec/graphs.rs`).
//!
//! `TESSERA_CUDA_PATHS` (`paths.rs`) turns paths off (`generic`: none; `-mmvq`: all but that
//! one), so one GPU run can compare each with the baseline. The plan's tests are tables
//! (`tests.rs`), and the test matrix's `cuda_coverage` test checks that some case reaches every
//! path the plan can return.

mod activations;
mod fusable;
mod fusion;
mod launch;
mod matmul;
mod paths;
mod summary;

pub use activations::{fold_q8_into_writer, q8_writers, share_q8_1, Q8Input, ROW_COUNTERS};
pub use fusable::{fusable, fused_windows, FUSED_KINDS};
pub use fusion::{fusion_windows, FusionKind, Window};
pub use launch::{early_launches, pdl, PDL_MIN_ARCH};
pub use matmul::{
    gemm_scratch, matmul_path, mmq_split, mmvq_warps_per_row, moe_mmq_scratch, mul_mat_id_path,
    possible_moe_paths, possible_paths, GemmScratch, MatmulPath, MmqSplit, MoeMmqScratch, MoePath,
    MMQ_COLS, MMQ_KB, MMQ_MAX_COLUMNS, MMQ_MAX_SPLITS, MMQ_ROWS, MMQ_TARGET_BLOCKS, MMQ_THREADS,
};
pub use paths::{FastPath, Paths};
pub use summary::summary;

use crate::types::{is_block, is_float, quantizable, readable};
use tessera_tensor::graph::{Context, Op, TensorDesc, TensorId};
use tessera_tensor::DType::{F16, F32, I32, I64};

/// What the plan knows of the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capability {
    /// The architecture number (`90` for sm_90).
    pub arch: u32,
    /// Whether cuBLAS was found (the batched products' `gemm` path needs it).
    pub cublas: bool,
}

/// The attention path of a FLASH_ATTN_EXT node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AttnPath {
    /// One warp per query row over the strided K/V (`flash_attn_op`).
    Generic,
    /// Decoding (at most [`ATTN_VEC_MAX_ROWS`] query rows per sequence): the KV cells split in
    /// `splits` chunks, four warps per chunk (`fattn_vec_op`), the chunks merged after
    /// (`fattn_vec_combine`) when there are several.
    Vec {
        /// Chunks of the KV cells, 1 to [`ATTN_VEC_MAX_SPLITS`].
        splits: u32,
    },
    /// Prompts (more rows): blocks of 16 query rows of one head over tiles of 32 cells whose K
    /// and V sit in shared memory as f32 (`fattn_tile_op`); head sizes up to
    /// [`ATTN_TILE_MAX_D`].
    Tile,
    /// Decoding over F16 caches on sm_80+: a block of four warps per (KV head, 16 of the query
    /// rows of the heads sharing it, chunk of cells), scores and P V by f16 `mma.sync`
    /// (`fattn_mma_dec_op`), the chunks merged after (`fattn_vec_combine`) when there are
    /// several.
    MmaDec {
        /// Chunks of the KV cells, 1 to [`ATTN_MMA_DEC_MAX_SPLITS`].
        splits: u32,
    },
    /// Prompts over F16 caches on sm_80+: blocks of 64 query rows of one head, 16 a warp,
    /// scores and P V by f16 `mma.sync` (`fattn_mma_op`); head sizes a multiple of 16 up to
    /// [`ATTN_MMA_MAX_D`], the same for K and V.
    Mma,
}

impl AttnPath {
    /// A short name: `generic`, or the fast path's as `TESSERA_CUDA_PATHS` spells it.
    pub fn name(self) -> &'static str {
        match self {
            AttnPath::Generic => "generic",
            AttnPath::Vec { .. } => FastPath::AttnVec.name(),
            AttnPath::Tile => FastPath::AttnTile.name(),
            AttnPath::MmaDec { .. } => FastPath::AttnMmaDec.name(),
            AttnPath::Mma => FastPath::AttnMma.name(),
        }
    }

    /// The KV cells' chunks of a decode path (1 for the others).
    pub fn splits(self) -> u32 {
        match self {
            AttnPath::Vec { splits } | AttnPath::MmaDec { splits } => splits,
            _ => 1,
        }
    }
}

/// Most blocks in a launch grid's second and third dimensions.
pub const GRID_YZ_MAX: usize = 65535;

/// Largest head size (K and V) the prompt attention's shared tiles hold (`FT_D` in
/// `kernels/fattn_tile.cu`).
pub const ATTN_TILE_MAX_D: usize = 128;
/// Query rows of one prompt-attention block (`FT_ROWS`).
pub const ATTN_TILE_ROWS: usize = 16;
/// Threads of one prompt-attention block (`FT_WARPS` warps).
pub const ATTN_TILE_THREADS: u32 = 128;

/// Largest head size of the tensor-core prompt attention (`FM_D` in `kernels/fattn_mma.cu`).
pub const ATTN_MMA_MAX_D: usize = 128;
/// Query rows of one tensor-core prompt-attention block (`FM_ROWS`).
pub const ATTN_MMA_ROWS: usize = 64;
/// Threads of one tensor-core prompt-attention block (`FM_WARPS` warps).
pub const ATTN_MMA_THREADS: u32 = 128;

/// Most chunks the tensor-core decode attention splits the KV cells into.
pub const ATTN_MMA_DEC_MAX_SPLITS: usize = 128;
/// Threads of one tensor-core decode-attention block (`FMD_WARPS` warps).
pub const ATTN_MMA_DEC_THREADS: u32 = 128;
/// KV cells per chunk the tensor-core decode attention aims at: one tile (`FMD_CELLS`, 16) for
/// each of a block's four warps. Small chunks spread a short context over many SMs (on the
/// H200 a 1B model's 256 cells as one chunk per KV head took 8 warps, 0.32 ms a layer); long
/// ones are capped at `ATTN_MMA_DEC_MAX_SPLITS` chunks.
const ATTN_MMA_DEC_CELLS_PER_SPLIT: usize = 64;

/// Most query rows per sequence the decode attention path takes.
pub const ATTN_VEC_MAX_ROWS: usize = 8;
/// Most chunks the decode attention splits the KV cells into.
pub const ATTN_VEC_MAX_SPLITS: usize = 32;
/// KV cells per chunk the split aims at.
const ATTN_VEC_CELLS_PER_SPLIT: usize = 1024;

/// The attention path of a node with query `q`, key `k` and value `v` (`sinks`: with attention
/// sinks, which the decode path's merge lacks), and its scratch bytes (the chunks' partial
/// results).
fn attn_path(
    q: &TensorDesc,
    k: &TensorDesc,
    v: &TensorDesc,
    sinks: bool,
    cap: Capability,
    paths: Paths,
) -> (AttnPath, usize) {
    let n_kv = k.ne[1];
    let decode = paths.allows(FastPath::AttnVec) && q.ne[1] <= ATTN_VEC_MAX_ROWS && !sinks;
    let grid_fits = q.ne[2] <= GRID_YZ_MAX && q.ne[3] <= GRID_YZ_MAX;
    // The f16 tensor-core kernels: F16 caches, head sizes a multiple of 16 up to 128.
    let f16_rows = |t: &TensorDesc| t.dtype == F16 && t.nb[0] == 2;
    let tensor_cores = |path: FastPath| {
        paths.allows(path)
            && cap.arch >= 80
            && f16_rows(k)
            && f16_rows(v)
            && q.ne[0] == v.ne[0]
            && q.ne[0] % 16 == 0
            && q.ne[0] <= ATTN_MMA_MAX_D
            && grid_fits
    };
    if !decode {
        if tensor_cores(FastPath::AttnMma) {
            return (AttnPath::Mma, 0);
        }
        let tile = paths.allows(FastPath::AttnTile)
            && q.ne[0] <= ATTN_TILE_MAX_D
            && v.ne[0] <= ATTN_TILE_MAX_D
            && grid_fits;
        return (if tile { AttnPath::Tile } else { AttnPath::Generic }, 0);
    }
    if n_kv == 0 {
        return (AttnPath::Generic, 0);
    }
    let rows = q.ne[1] * q.ne[2] * q.ne[3];
    let partials = |splits: usize| if splits > 1 { rows * splits * (v.ne[0] + 2) * 4 } else { 0 };
    let heads_fit = k.ne[2] == v.ne[2]
        && q.ne[2] % k.ne[2] == 0
        && k.ne[2] * (q.ne[2] / k.ne[2] * q.ne[1]).div_ceil(16) <= GRID_YZ_MAX;
    if tensor_cores(FastPath::AttnMmaDec) && heads_fit {
        let splits = n_kv.div_ceil(ATTN_MMA_DEC_CELLS_PER_SPLIT).clamp(1, ATTN_MMA_DEC_MAX_SPLITS);
        return (AttnPath::MmaDec { splits: splits as u32 }, partials(splits));
    }
    let splits = n_kv.div_ceil(ATTN_VEC_CELLS_PER_SPLIT).clamp(1, ATTN_VEC_MAX_SPLITS);
    (AttnPath::Vec { splits: splits as u32 }, partials(splits))
}

/// The kernel (family) a node runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kernel {
    /// A view or a leaf: nothing to launch.
    Nothing,
    /// `get_rows_op`.
    GetRows,
    /// `binary_op` (ADD, SUB, MUL, DIV with broadcast).
    Binary,
    /// `unary_op` (SCALE and the unary functions).
    Unary,
    /// `glu_op`.
    Glu,
    /// `norm_op` (RMS_NORM and NORM).
    Norm,
    /// `soft_max_op`.
    SoftMax,
    /// `rope_op`.
    Rope,
    /// A matrix product on the given path.
    MulMat(MatmulPath),
    /// `cpy_q_op`: floats quantized into blocks.
    CpyQuantize,
    /// `cpy_rows_bytes`: blocks copied between equal types.
    CpyBlocks,
    /// `cpy_op`: element by element.
    Cpy,
    /// `set_rows_q_op`.
    SetRowsQuantize,
    /// `set_rows_op`.
    SetRows,
    /// Attention on the given path.
    FlashAttn(AttnPath),
    /// `concat_op`.
    Concat,
    /// `sum_rows_op`.
    SumRows,
    /// `argmax_op`.
    Argmax,
    /// `hadamard_op`: rows of up to [`HADAMARD_MAX`] values.
    Hadamard,
    /// `im2col_op`.
    Im2Col,
    /// `pool2d_op`.
    Pool2d,
    /// An expert product on the given path.
    MulMatId(MoePath),
    /// `argsort_op`.
    Argsort,
    /// `add_id_op`.
    AddId,
    /// `swiglu_oai_op`.
    SwiGluOai,
}

/// The longest row `hadamard_op` transforms (its shared buffer); longer rows stay on the CPU.
pub const HADAMARD_MAX: usize = 1024;

/// The plan of one node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodePlan {
    /// What runs it.
    pub kernel: Kernel,
    /// Bytes of scratch memory it needs while it runs, besides the int8 products' shared
    /// activations ([`share_q8_1`]); nodes run in stream order, so one region of the largest
    /// need serves them all.
    pub scratch: usize,
}

impl NodePlan {
    fn of(kernel: Kernel) -> Result<NodePlan, String> {
        Ok(NodePlan { kernel, scratch: 0 })
    }
}

fn types_of(d: &TensorDesc) -> String {
    format!("{} {}", d.dtype, d.shape_str())
}

/// The plan of `node`, or why the backend does not run it.
pub fn plan_node(
    ctx: &Context,
    node: TensorId,
    cap: Capability,
    paths: Paths,
) -> Result<NodePlan, String> {
    let d = ctx.get(node);
    let s = |i: usize| d.src[i].map(|s| ctx.get(s));
    let float = |t: &TensorDesc| is_float(t.dtype);
    let refuse = |why: &str| Err(format!("{why} ({} -> {})", srcs(ctx, d), types_of(d)));
    let Some(src0) = s(0) else {
        return if d.op.is_view() || d.op == Op::None {
            NodePlan::of(Kernel::Nothing)
        } else {
            refuse("no source")
        };
    };
    let index = |t: Option<&TensorDesc>| t.is_some_and(|i| matches!(i.dtype, I32 | I64));
    match d.op {
        Op::None | Op::View | Op::Reshape | Op::Permute { .. } | Op::Transpose => {
            NodePlan::of(Kernel::Nothing)
        }
        Op::GetRows if readable(src0.dtype) && index(s(1)) && float(d) => {
            NodePlan::of(Kernel::GetRows)
        }
        Op::Add | Op::Sub | Op::Mul | Op::Div
            if float(src0) && s(1).is_some_and(float) && float(d) =>
        {
            NodePlan::of(Kernel::Binary)
        }
        Op::Concat { .. } if float(src0) && s(1).is_some_and(float) && float(d) => {
            NodePlan::of(Kernel::Concat)
        }
        Op::Scale { .. } | Op::Unary(_) | Op::Clamp { .. } if float(src0) && float(d) => {
            NodePlan::of(Kernel::Unary)
        }
        Op::RmsNorm { .. } | Op::Norm { .. } if float(src0) && float(d) => {
            NodePlan::of(Kernel::Norm)
        }
        Op::SumRows if float(src0) && float(d) => NodePlan::of(Kernel::SumRows),
        Op::Im2Col { .. } if s(1).is_some_and(float) && float(d) => NodePlan::of(Kernel::Im2Col),
        Op::Pool2d { .. } if float(src0) && d.dtype == F32 => NodePlan::of(Kernel::Pool2d),
        Op::Hadamard if float(src0) && float(d) && src0.ne[0] <= HADAMARD_MAX => {
            NodePlan::of(Kernel::Hadamard)
        }
        Op::Glu { .. } if float(src0) && s(1).is_none_or(float) && float(d) => {
            NodePlan::of(Kernel::Glu)
        }
        Op::SoftMax { .. }
            if float(src0)
                && s(1).is_none_or(float)
                && s(2).is_none_or(|sk| sk.dtype == F32)
                && float(d) =>
        {
            NodePlan::of(Kernel::SoftMax)
        }
        Op::Rope(_)
            if matches!(src0.dtype, F32 | F16)
                && s(1).is_some_and(|p| p.dtype == I32)
                && s(2).is_none_or(|f| f.dtype == F32)
                && d.dtype == src0.dtype =>
        {
            NodePlan::of(Kernel::Rope)
        }
        Op::MulMat => match s(1) {
            Some(src1) if readable(src0.dtype) && float(src1) && d.dtype == F32 => {
                let (path, scratch) = matmul_path(src0, src1, d, cap, paths);
                Ok(NodePlan { kernel: Kernel::MulMat(path), scratch })
            }
            _ => refuse("MUL_MAT reads weights of a CUDA type and float activations into F32"),
        },
        Op::Cpy | Op::Cont | Op::Dup => {
            if quantizable(d.dtype) && float(src0) && d.ne[0] % d.dtype.block_size() == 0 {
                NodePlan::of(Kernel::CpyQuantize)
            } else if is_block(d.dtype) && src0.dtype == d.dtype {
                NodePlan::of(Kernel::CpyBlocks)
            } else if readable(src0.dtype) && float(d) {
                NodePlan::of(Kernel::Cpy)
            } else {
                refuse("no CUDA copy between these types")
            }
        }
        Op::SetRows if s(1).is_some_and(float) && index(s(2)) => {
            if float(d) {
                NodePlan::of(Kernel::SetRows)
            } else if quantizable(d.dtype) && d.ne[0] % d.dtype.block_size() == 0 {
                NodePlan::of(Kernel::SetRowsQuantize)
            } else {
                refuse("SET_ROWS writes floats or the quantizable block types")
            }
        }
        Op::FlashAttnExt { .. }
            if src0.dtype == F32
                && s(4).is_none_or(|sk| sk.dtype == F32)
                && s(1).is_some_and(|k| readable(k.dtype))
                && s(2).is_some_and(|v| readable(v.dtype) && v.ne[0] <= 512)
                && s(3).is_none_or(float)
                && d.dtype == F32 =>
        {
            let (k, v) = (s(1).expect("checked above"), s(2).expect("checked above"));
            let (path, scratch) = attn_path(src0, k, v, s(4).is_some(), cap, paths);
            Ok(NodePlan { kernel: Kernel::FlashAttn(path), scratch })
        }
        Op::Argmax if src0.dtype == F32 && src0.ne[2] == 1 && src0.ne[3] == 1 => {
            NodePlan::of(Kernel::Argmax)
        }
        Op::MulMatId
            if readable(src0.dtype)
                && s(1).is_some_and(|b| b.dtype == F32)
                && s(2).is_some_and(|i| i.dtype == I32)
                && d.dtype == F32 =>
        {
            let (b, ids) = (s(1).expect("checked"), s(2).expect("checked"));
            let (path, scratch) = mul_mat_id_path(src0, b, ids, d, cap, paths);
            Ok(NodePlan { kernel: Kernel::MulMatId(path), scratch })
        }
        Op::Argsort { .. } if src0.dtype == F32 && d.dtype == I32 => NodePlan::of(Kernel::Argsort),
        Op::AddId
            if src0.dtype == F32
                && s(1).is_some_and(|b| b.dtype == F32)
                && s(2).is_some_and(|i| i.dtype == I32)
                && d.dtype == F32 =>
        {
            NodePlan::of(Kernel::AddId)
        }
        Op::SwiGluOai { .. } if src0.dtype == F32 && s(1).is_some_and(float) && d.dtype == F32 => {
            NodePlan::of(Kernel::SwiGluOai)
        }
        _ => refuse(&format!("{} has no CUDA kernel for these types", d.op.name())),
    }
}

/// The sources' types and shapes, for refusals.
fn srcs(ctx: &Context, d: &TensorDesc) -> String {
    let v: Vec<String> = d.src.iter().flatten().map(|&s| types_of(ctx.get(s))).collect();
    v.join(", ")
}

#[cfg(test)]
mod tests;
