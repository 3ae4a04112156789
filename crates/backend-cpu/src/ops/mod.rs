//! The op kernels and their dispatch (ggml's `ggml_compute_forward`).
//!
//! Every thread of the pool calls [`compute`] for every node, as in ggml; each kernel takes its
//! share of rows from [`ComputeParams::split`] (or chunks, for MUL_MAT) and never writes outside
//! it, so no node needs a lock. [`supports`] says which types and layouts the kernels take, so
//! the backend refuses a graph up front instead of failing inside a kernel.

mod attention;
mod attention_f16;
mod attention_split;
mod attention_tiled;
mod conv;
mod copy;
mod elementwise;
mod norm;
mod rope;
pub(crate) mod rowio;
mod rows;
mod sort;
mod vec_f16;
mod vexp;

use crate::{matmul, ComputeParams, TensorRef};
use tessera_tensor::graph::Op;
use tessera_tensor::{quant, DType};

/// A node ready to compute: its op, destination and sources resolved to memory.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Node {
    /// The op and its parameters.
    pub op: Op,
    /// The result.
    pub dst: TensorRef,
    /// The sources, in ggml's order.
    pub src: [Option<TensorRef>; 5],
}

impl Node {
    /// Source `i`, which the op's constructor guarantees is present.
    fn s(&self, i: usize) -> &TensorRef {
        self.src[i].as_ref().expect("the graph builder sets every required source")
    }
}

/// Whether `op` computes nothing (leafs and views).
pub(crate) fn is_noop(op: &Op) -> bool {
    matches!(op, Op::None) || op.is_view()
}

/// Scratch bytes the node needs in the shared work buffer.
pub(crate) fn work_size(node: &Node, nth: usize, batch_invariant: bool) -> usize {
    match node.op {
        Op::FlashAttnExt { .. }
            if !batch_invariant && attention_split::applies(node.s(0), node.s(1), node.s(2)) =>
        {
            attention_split::work_size(node.s(0), node.s(2), nth)
        }
        Op::MulMat => matmul::work_size(node.s(0), node.s(1)),
        // The same buffer: src1's rows converted to the weights' dot type.
        Op::MulMatId => matmul::work_size(node.s(0), node.s(1)),
        _ => 0,
    }
}

/// Computes this thread's share of `node`.
pub(crate) fn compute(p: &ComputeParams, node: &Node) {
    let dst = &node.dst;
    match node.op {
        Op::None | Op::View | Op::Reshape | Op::Permute { .. } | Op::Transpose => {}
        Op::MulMat => matmul::mul_mat(p, dst, node.s(0), node.s(1)),
        Op::MulMatId => matmul::mul_mat_id::mul_mat_id(p, dst, node.s(0), node.s(1), node.s(2)),
        Op::Argsort { descending } => sort::argsort(p, dst, node.s(0), descending),
        Op::Im2Col { s0, s1, p0, p1, d0, d1, is_2d } => {
            conv::im2col(p, dst, node.s(0), node.s(1), [s0, s1, p0, p1, d0, d1], is_2d)
        }
        Op::Pool2d { op, k0, k1, s0, s1, p0, p1 } => {
            conv::pool_2d(p, dst, node.s(0), op, [k0, k1, s0, s1, p0, p1])
        }
        Op::Clamp { min, max } => elementwise::clamp(p, dst, node.s(0), min, max),
        Op::AddId => elementwise::add_id(p, dst, node.s(0), node.s(1), node.s(2)),
        Op::SwiGluOai { alpha, limit } => {
            elementwise::swiglu_oai(p, dst, node.s(0), node.s(1), alpha, limit)
        }
        Op::Add | Op::Sub | Op::Mul | Op::Div => {
            elementwise::binary(p, node.op, dst, node.s(0), node.s(1))
        }
        Op::Scale { scale, bias } => elementwise::scale(p, dst, node.s(0), scale, bias),
        Op::Hadamard => elementwise::hadamard(p, dst, node.s(0)),
        Op::Unary(u) => elementwise::unary(p, u, dst, node.s(0)),
        Op::Glu { op, swapped } => elementwise::glu(p, op, swapped, dst, node.s(0), node.src[1]),
        Op::RmsNorm { eps } => norm::rms_norm(p, dst, node.s(0), eps),
        Op::Norm { eps } => norm::norm(p, dst, node.s(0), eps),
        Op::SumRows => norm::sum_rows(p, dst, node.s(0)),
        Op::Argmax => norm::argmax(p, dst, node.s(0)),
        Op::SoftMax { scale, max_bias } => {
            let sinks = node.src[2];
            attention::soft_max(p, dst, node.s(0), [node.src[1], sinks], scale, max_bias)
        }
        Op::FlashAttnExt { scale, max_bias, softcap } => {
            let qkv = [node.s(0), node.s(1), node.s(2)];
            let params = [scale, max_bias, softcap];
            // The tiled algorithm (from 64 query rows) sums in another order than the
            // one-row one: not in batch-invariant mode. (Nor always tiled: its softmax rescales
            // at KV tiles of fixed cell positions, so a row's bits would depend on where its
            // sequence's cells lie in the cache, which other requests decide.)
            let extra = [node.src[3], node.src[4]];
            // One query row deep in the cache: split over the cells as llama.cpp (its bits
            // depend on the thread count, so not in batch-invariant mode either).
            let min_rows = match p.prefer_batched {
                true => attention_tiled::PREFERRED_MIN_ROWS,
                false => attention_tiled::Q_TILE,
            };
            if !p.batch_invariant && attention_tiled::applies(qkv[0], qkv[1], qkv[2], min_rows) {
                attention_tiled::flash_attn_ext_tiled(p, dst, qkv, extra, params)
            } else if !p.batch_invariant && attention_split::applies(qkv[0], qkv[1], qkv[2]) {
                attention_split::flash_attn_ext_split(p, dst, qkv, extra, params)
            } else {
                attention::flash_attn_ext(p, dst, qkv, extra, params)
            }
        }
        Op::Rope(params) => rope::rope(p, dst, node.s(0), node.s(1), node.src[2], &params),
        Op::GetRows => rows::get_rows(p, dst, node.s(0), node.s(1)),
        Op::SetRows => rows::set_rows(p, dst, node.s(1), node.s(2)),
        Op::Concat { dim } => rows::concat(p, dst, node.s(0), node.s(1), dim),
        Op::Cpy | Op::Cont | Op::Dup => copy::copy(p, dst, node.s(0)),
    }
}

fn is_float(d: DType) -> bool {
    matches!(d, DType::F32 | DType::F16 | DType::BF16)
}

/// Whether the kernels compute `node` (types and layouts). Shapes are the graph builder's
/// business and are trusted.
pub(crate) fn supports(node: &Node) -> bool {
    use DType::*;
    let dst = &node.dst;
    let t = |i: usize| node.src[i].map(|s| s.dtype);
    let packed_rows = |r: &TensorRef| r.rows_contiguous() || r.ne[0] == 1;
    match node.op {
        Op::None | Op::View | Op::Reshape | Op::Permute { .. } | Op::Transpose => true,
        Op::MulMat => {
            matmul::supports(node.s(0).dtype, node.s(1).dtype)
                && node.s(0).rows_contiguous()
                && dst.dtype == F32
                && packed_rows(dst)
        }
        Op::MulMatId => {
            matmul::mul_mat_id::supports(node.s(0).dtype, node.s(1).dtype)
                && node.s(0).rows_contiguous()
                && node.s(2).dtype == I32
                && dst.dtype == F32
                && packed_rows(dst)
        }
        Op::Argsort { .. } => node.s(0).dtype == F32 && dst.dtype == I32,
        Op::Im2Col { .. } => {
            matches!(node.s(1).dtype, F32 | F16)
                && node.s(1).nb[0] == node.s(1).dtype.type_size()
                && matches!(dst.dtype, F32 | F16)
                && dst.is_contiguous()
        }
        Op::Pool2d { .. } => {
            matches!(node.s(0).dtype, F32 | F16)
                && node.s(0).nb[0] == node.s(0).dtype.type_size()
                && dst.dtype == F32
                && dst.is_contiguous()
        }
        Op::Clamp { .. } => node.s(0).dtype == F32 && dst.dtype == F32,
        Op::AddId => {
            node.s(0).dtype == F32
                && node.s(1).dtype == F32
                && node.s(2).dtype == I32
                && dst.dtype == F32
        }
        Op::SwiGluOai { .. } => {
            node.s(0).dtype == F32 && node.s(1).dtype == F32 && dst.dtype == F32
        }
        Op::Add | Op::Sub | Op::Mul | Op::Div => {
            is_float(dst.dtype) && is_float(node.s(0).dtype) && is_float(node.s(1).dtype)
        }
        Op::Hadamard => {
            matches!(node.s(0).dtype, F32 | F16) && dst.dtype == F32 && node.s(0).ne[0] >= 2
        }
        Op::Scale { .. } | Op::RmsNorm { .. } | Op::Norm { .. } | Op::SumRows => {
            node.s(0).dtype == F32 && dst.dtype == F32
        }
        Op::Argmax => node.s(0).dtype == F32 && dst.dtype == I32,
        Op::Unary(_) => matches!(node.s(0).dtype, F32 | F16) && matches!(dst.dtype, F32 | F16),
        Op::Glu { .. } => {
            matches!(node.s(0).dtype, F32 | F16)
                && node.src[1].is_none_or(|u| matches!(u.dtype, F32 | F16))
        }
        Op::SoftMax { .. } => {
            node.s(0).dtype == F32
                && dst.dtype == F32
                && t(1).is_none_or(|m| matches!(m, F32 | F16))
                && t(2).is_none_or(|s| s == F32)
        }
        Op::FlashAttnExt { .. } => {
            let kv_ok = |r: &TensorRef| {
                (is_float(r.dtype) || quant::can_dequantize(r.dtype)) && packed_rows(r)
            };
            node.s(0).dtype == F32
                && kv_ok(node.s(1))
                && kv_ok(node.s(2))
                && t(3).is_none_or(|m| matches!(m, F32 | F16))
                && t(4).is_none_or(|s| s == F32)
                && dst.dtype == F32
        }
        Op::Rope(_) => {
            matches!(node.s(0).dtype, F32 | F16)
                && node.s(1).dtype == I32
                && t(2).is_none_or(|f| f == F32)
        }
        Op::GetRows => {
            let src = node.s(0);
            node.s(1).dtype == I32
                && (is_float(src.dtype)
                    || src.dtype == I32
                    || (quant::can_dequantize(src.dtype) && packed_rows(src)))
        }
        Op::SetRows => {
            node.s(1).dtype == F32
                && matches!(node.s(2).dtype, I32 | I64)
                && (is_float(dst.dtype) || (quant::can_quantize(dst.dtype) && packed_rows(dst)))
        }
        Op::Concat { .. } => {
            dst.dtype.block_size() == 1
                && node.s(0).dtype == dst.dtype
                && node.s(1).dtype == dst.dtype
        }
        Op::Cpy | Op::Cont | Op::Dup => copy::supports(dst, node.s(0)),
    }
}
