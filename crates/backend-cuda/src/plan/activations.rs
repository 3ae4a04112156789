//! The int8 products' activations: each distinct input is quantized to Q8_1 once and read by
//! every int8 product of it (Q, K and V of one norm output, gate and up of one FFN input),
//! where llama.cpp quantizes it again for every product.
//!
//! Each distinct input gets its own region of the scratch arena for the whole graph (a bump
//! allocation: a decode graph's inputs take a few MiB at most). A node that writes into the
//! input's storage between two readers (an in-place write, say) makes the next reader quantize
//! again.

use super::{Kernel, MatmulPath, NodePlan};
use crate::types::Q8_1_BYTES;
use std::collections::HashMap;
use tessera_tensor::graph::{Context, Op, TensorId};

/// Alignment of each region in the arena (bytes).
const ALIGN: usize = 256;

/// The group counters of the gate/up kernels that write their output's Q8_1 blocks (one u32 a
/// group of 32 rows, `q8_1_of_rows` in quant.cu): the executor keeps them zeroed at the start
/// of its arena, and each launch leaves them zero. Outputs of more rows (none in the models
/// known: 8B has 14336) keep their own quantization.
pub const ROW_COUNTERS: usize = 4096;

/// Where one int8 product finds its Q8_1 activations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Q8Input {
    /// Byte offset in the scratch arena.
    pub offset: usize,
    /// This product quantizes the input there first (the first reader since the input was
    /// last written); the others read what it wrote.
    pub quantize: bool,
}

/// The storage a tensor's bytes live in (a view's source).
fn root(ctx: &Context, id: TensorId) -> TensorId {
    ctx.get(id).view_src.unwrap_or(id)
}

/// For each node of `plans` (in order), its Q8_1 input if it is an int8 product, and the
/// scratch bytes they take in all.
pub fn share_q8_1(ctx: &Context, plans: &[(TensorId, NodePlan)]) -> (Vec<Option<Q8Input>>, usize) {
    let mut out = Vec::with_capacity(plans.len());
    // Inputs quantized and not written since: input -> its region.
    let mut live: HashMap<TensorId, usize> = HashMap::new();
    let mut top = 0usize;
    for &(node, plan) in plans {
        let mut this = None;
        if matches!(plan.kernel, Kernel::MulMat(MatmulPath::Mmvq | MatmulPath::Mmq)) {
            let d = ctx.get(node);
            let x = d.src[1].expect("a product has activations");
            this = Some(match live.get(&x) {
                Some(&offset) => Q8Input { offset, quantize: false },
                None => {
                    let offset = top;
                    let xd = ctx.get(x);
                    let bytes = xd.ne[1] * (xd.ne[0] / 32) * Q8_1_BYTES;
                    top = (top + bytes).div_ceil(ALIGN) * ALIGN;
                    live.insert(x, offset);
                    Q8Input { offset, quantize: true }
                }
            });
        }
        // Whatever this node writes invalidates the inputs stored there.
        if plan.kernel != Kernel::Nothing {
            let written = root(ctx, node);
            live.retain(|&x, _| root(ctx, x) != written);
        }
        out.push(this);
    }
    (out, top)
}

/// Where the node at `plans[end]` (a fused norm window's last node, or an attention whose
/// chunks' merge writes its output) computes `out` and later int8 products read it (directly or
/// through a RESHAPE: the attention output as one column a token), its kernel can write the
/// Q8_1 blocks itself: the first of those products then no longer quantizes (its `quantize` is
/// cleared in `q8`), and the region's offset is returned for the writer's launch. `None` where
/// no int8 product reads `out`, or a node writes into `out`'s storage before the first does
/// (the blocks would be stale), or `out` is not contiguous F32 rows of whole 32-value blocks.
pub fn fold_q8_into_writer(
    ctx: &Context,
    plans: &[(TensorId, NodePlan)],
    q8: &mut [Option<Q8Input>],
    end: usize,
) -> Option<usize> {
    let out = plans[end].0;
    let d = ctx.get(out);
    if d.dtype != tessera_tensor::DType::F32 || d.ne[0] % 32 != 0 || !d.is_contiguous() {
        return None;
    }
    // The product's activations are `out`, or a reshape of it.
    let reads_out = |x: Option<TensorId>| {
        x.is_some_and(|x| {
            x == out || (ctx.get(x).op == Op::Reshape && ctx.get(x).src[0] == Some(out))
        })
    };
    for (j, (node, plan)) in plans.iter().enumerate().skip(end + 1) {
        if let Some(input) = q8[j].as_mut().filter(|_| reads_out(ctx.get(*node).src[1])) {
            if !input.quantize {
                return None;
            }
            input.quantize = false;
            return Some(input.offset);
        }
        if plan.kernel != Kernel::Nothing && root(ctx, *node) == root(ctx, out) {
            return None;
        }
    }
    None
}

/// The kernels that write Q8_1 blocks for the int8 products reading their output, as the
/// executor launches them: each norm window of `windows` (the fused windows taken), each
/// gate/up window of at most `32 * ROW_COUNTERS` rows, and each attention whose chunks' merge
/// writes its output, folded in list order by
/// [`fold_q8_into_writer`] (clearing the products' quantizations in `q8`). Returns, for the
/// node each writer is launched at (a window's first node, or the attention), the region's
/// offset in the arena.
pub fn q8_writers(
    ctx: &Context,
    plans: &[(TensorId, NodePlan)],
    windows: &[super::Window],
    q8: &mut [Option<Q8Input>],
) -> HashMap<TensorId, usize> {
    let index: HashMap<TensorId, usize> =
        plans.iter().enumerate().map(|(i, (n, _))| (*n, i)).collect();
    let mut writers = HashMap::new();
    let writers_of_rows = windows.iter().filter(|w| match w.kind {
        super::FusionKind::RmsNormMul | super::FusionKind::AddRmsNormMul => true,
        super::FusionKind::GateUpGlu => {
            let glu = w.nodes.last().expect("a window has nodes");
            ctx.get(*glu).ne[0] <= 32 * ROW_COUNTERS
        }
        _ => false,
    });
    for w in writers_of_rows {
        let end = index[w.nodes.last().expect("a window has nodes")];
        if let Some(offset) = fold_q8_into_writer(ctx, plans, q8, end) {
            writers.insert(w.nodes[0], offset);
        }
    }
    for (i, (node, plan)) in plans.iter().enumerate() {
        if matches!(plan.kernel, Kernel::FlashAttn(p) if p.splits() > 1) {
            if let Some(offset) = fold_q8_into_writer(ctx, plans, q8, i) {
                writers.insert(*node, offset);
            }
        }
    }
    writers
}

#[cfg(test)]
mod tests {
    use super::super::{plan_node, Capability, Paths};
    use super::*;
    use tessera_tensor::graph::Graph;
    use tessera_tensor::DType::{F32, I64, Q8_0};

    fn plans(ctx: &Context, graph: &Graph) -> Vec<(TensorId, NodePlan)> {
        let cap = Capability { arch: 90, cublas: true };
        graph.nodes().iter().map(|&n| (n, plan_node(ctx, n, cap, Paths::all()).unwrap())).collect()
    }

    /// Q, K and V of one normed input: quantized once, read three times; the output
    /// projection's input is another region.
    #[test]
    fn q_k_v_share_one_quantization() {
        let mut ctx = Context::new();
        let x = ctx.new_tensor(F32, &[256, 1]).unwrap();
        let n = ctx.rms_norm(x, 1e-6).unwrap();
        let w: Vec<TensorId> = (0..3).map(|_| ctx.new_tensor(Q8_0, &[256, 256]).unwrap()).collect();
        let q = ctx.mul_mat(w[0], n).unwrap();
        let k = ctx.mul_mat(w[1], n).unwrap();
        let v = ctx.mul_mat(w[2], n).unwrap();
        let qk = ctx.add(q, k).unwrap();
        let s = ctx.add(qk, v).unwrap();
        let wo = ctx.new_tensor(Q8_0, &[256, 64]).unwrap();
        let o = ctx.mul_mat(wo, s).unwrap();
        let graph = Graph::build(&ctx, &[o]);
        let p = plans(&ctx, &graph);
        let (inputs, total) = share_q8_1(&ctx, &p);
        let at = |id: TensorId| inputs[p.iter().position(|(n, _)| *n == id).unwrap()];
        assert_eq!(at(q), Some(Q8Input { offset: 0, quantize: true }));
        assert_eq!(at(k), Some(Q8Input { offset: 0, quantize: false }));
        assert_eq!(at(v), Some(Q8Input { offset: 0, quantize: false }));
        assert_eq!(at(o), Some(Q8Input { offset: 512, quantize: true }), "288 bytes, aligned");
        assert_eq!(at(n), None);
        assert_eq!(total, 1024);
    }

    /// A norm's output read by int8 products: the norm writes the blocks and the first
    /// product stops quantizing; not where the output is written before the first reader,
    /// nor for rows that are not whole blocks.
    #[test]
    fn a_norm_writes_its_readers_blocks() {
        let mut ctx = Context::new();
        let x = ctx.new_tensor(F32, &[256, 2]).unwrap();
        let g = ctx.new_tensor(F32, &[256]).unwrap();
        let n = ctx.rms_norm(x, 1e-6).unwrap();
        let h = ctx.mul(n, g).unwrap();
        let w = ctx.new_tensor(Q8_0, &[256, 64]).unwrap();
        let a = ctx.mul_mat(w, h).unwrap();
        let b = ctx.mul_mat(w, h).unwrap();
        let graph = Graph::build(&ctx, &[a, b]);
        let p = plans(&ctx, &graph);
        let (mut inputs, _) = share_q8_1(&ctx, &p);
        let end = p.iter().position(|(id, _)| *id == h).unwrap();
        let at = |id: TensorId| p.iter().position(|(n, _)| *n == id).unwrap();
        assert_eq!(inputs[at(a)], Some(Q8Input { offset: 0, quantize: true }));
        assert_eq!(fold_q8_into_writer(&ctx, &p, &mut inputs, end), Some(0));
        assert_eq!(inputs[at(a)], Some(Q8Input { offset: 0, quantize: false }));
        assert_eq!(inputs[at(b)], Some(Q8Input { offset: 0, quantize: false }));
        // Folded once: a second fold finds nothing left to take.
        assert_eq!(fold_q8_into_writer(&ctx, &p, &mut inputs, end), None);
        // The norm's output overwritten (a row set) before the product reads it.
        let rows = ctx.new_tensor(F32, &[256, 1]).unwrap();
        let idx = ctx.new_tensor(I64, &[1]).unwrap();
        let written = ctx.set_rows(h, rows, idx).unwrap();
        let c = ctx.mul_mat(w, h).unwrap();
        let graph = Graph::build(&ctx, &[written, c]);
        let p = plans(&ctx, &graph);
        let (mut inputs, _) = share_q8_1(&ctx, &p);
        let end = p.iter().position(|(id, _)| *id == h).unwrap();
        assert_eq!(fold_q8_into_writer(&ctx, &p, &mut inputs, end), None, "{:?}", graph.nodes());
        // Rows of 40 values (not whole blocks) read by a float product.
        let x = ctx.new_tensor(F32, &[40, 1]).unwrap();
        let n = ctx.rms_norm(x, 1e-6).unwrap();
        let wf = ctx.new_tensor(F32, &[40, 8]).unwrap();
        let y = ctx.mul_mat(wf, n).unwrap();
        let graph = Graph::build(&ctx, &[y]);
        let p = plans(&ctx, &graph);
        let (mut inputs, _) = share_q8_1(&ctx, &p);
        let end = p.iter().position(|(id, _)| *id == n).unwrap();
        assert_eq!(fold_q8_into_writer(&ctx, &p, &mut inputs, end), None);
    }

    /// Four columns take four columns of Q8_1 blocks.
    #[test]
    fn columns_take_their_blocks() {
        let mut ctx = Context::new();
        let x = ctx.new_tensor(F32, &[256, 4]).unwrap();
        let w = ctx.new_tensor(Q8_0, &[256, 16]).unwrap();
        let y = ctx.mul_mat(w, x).unwrap();
        let graph = Graph::build(&ctx, &[y]);
        let p = plans(&ctx, &graph);
        let (inputs, total) = share_q8_1(&ctx, &p);
        assert_eq!(inputs.iter().flatten().count(), 1);
        assert_eq!(total, (4 * 8 * 36usize).div_ceil(256) * 256);
    }

    /// A write into the input's storage between two readers: the second quantizes again.
    #[test]
    fn a_write_in_between_makes_the_next_reader_quantize() {
        let mut ctx = Context::new();
        let x = ctx.new_tensor(F32, &[256, 4]).unwrap();
        let col = ctx.view(x, &[256, 1], &[1024], 0).unwrap();
        let w = ctx.new_tensor(Q8_0, &[256, 16]).unwrap();
        let a = ctx.mul_mat(w, col).unwrap();
        let rows = ctx.new_tensor(F32, &[256, 1]).unwrap();
        let idx = ctx.new_tensor(I64, &[1]).unwrap();
        let written = ctx.set_rows(x, rows, idx).unwrap();
        let b = ctx.mul_mat(w, col).unwrap();
        let graph = Graph::build(&ctx, &[a, written, b]);
        let p = plans(&ctx, &graph);
        let (inputs, _) = share_q8_1(&ctx, &p);
        let quantizing: Vec<bool> = inputs.iter().flatten().map(|i| i.quantize).collect();
        assert_eq!(quantizing, [true, true], "{:?}", graph.nodes());
    }
}
