//! The launches of MUL_MAT_ID's int8 paths: the activations (contiguous, checked by the plan)
//! quantized to Q8_1 in the node's scratch, then one warp per expert row for each (slot, token)
//! (`mmvq_id_*`, decoding), or for a batch the (slot, token) pairs grouped by expert on the
//! device and each expert's pairs through the int8 tensor cores (`mmq_id_*`), each expert's
//! weights read once per 32 of its pairs instead of once per pair.

use super::args::{warps, Arg, TensorArg};
use super::nodes::{quantize_q8_1, Pending, Resolver};
use crate::plan::{moe_mmq_scratch, MoePath, MMQ_COLS, MMQ_ROWS, MMQ_THREADS};
use crate::types::row_of;
use crate::CudaError;
use cudarc::driver::LaunchConfig;
use tessera_tensor::graph::TensorId;

/// Threads of the one block that groups the pairs by expert (`moe_group_pairs`).
const GROUP_THREADS: u32 = 256;

impl Resolver<'_> {
    /// MUL_MAT_ID on `path` (an int8 one): see the module docs.
    pub(super) fn mul_mat_id_int8(
        &self,
        id: TensorId,
        path: MoePath,
        dst: TensorArg,
        w: TensorArg,
    ) -> Result<Vec<Pending>, CudaError> {
        let d = self.ctx.get(id);
        let wd = self.ctx.get(d.src[0].expect("experts"));
        let b = self.src(id, 1)?;
        let ids = self.src(id, 2)?;
        let row = row_of(wd.dtype);
        let entry = match path {
            MoePath::Mmvq => row.and_then(|r| r.mmvq_id),
            MoePath::Mmq => row.and_then(|r| r.mmq_id),
            MoePath::Generic => None,
        }
        .ok_or_else(|| {
            CudaError::Driver(format!(
                "{} planned for {} experts without a kernel",
                path.name(),
                wd.dtype
            ))
        })?;
        let (nrows, nblocks, n_expert) = (wd.ne[1], wd.ne[0] / 32, wd.ne[2]);
        let (nb, n_tokens, n_used) = (b.ne[1], b.ne[2], ids.ne[0]);
        let all = nblocks as i64 * nb * n_tokens;
        let quantize = quantize_q8_1(b.p, self.own, all);
        // Both kernels: experts, Q8_1 activations, output, the ids (or their groups), then the
        // same shapes.
        let args_with = |routing: u64| {
            vec![
                Arg::Ptr(w.p),
                Arg::Ptr(self.own),
                Arg::Ptr(dst.p),
                Arg::Ptr(routing),
                (nrows as i32).into(),
                (nblocks as i32).into(),
                (wd.nb[1] as i64).into(),
                (wd.nb[2] as i64).into(),
                (n_expert as i32).into(),
                (n_used as i32).into(),
                (nb as i32).into(),
            ]
        };
        if path == MoePath::Mmvq {
            self.check_block_alignment(wd.dtype, w.p, &[wd.nb[1] as i64, wd.nb[2] as i64])?;
            let mut args = args_with(ids.p);
            args.push((ids.nb[1] / 4).into());
            let rows = warps(nrows, 8);
            let cfg =
                LaunchConfig { grid_dim: (rows.grid_dim.0, (n_used * n_tokens) as u32, 1), ..rows };
            return Ok(vec![quantize, Pending { entry, cfg, args }]);
        }
        // The groups after the activations in the node's scratch (plan: moe_mmq_scratch).
        let s =
            moe_mmq_scratch(wd.ne[0], nb as usize, n_tokens as usize, n_used as usize, n_expert);
        let groups = self.own + s.groups_offset as u64;
        let n_pairs = (n_used * n_tokens) as usize;
        let group = Pending {
            entry: "moe_group_pairs",
            cfg: LaunchConfig {
                grid_dim: (1, 1, 1),
                block_dim: (GROUP_THREADS, 1, 1),
                shared_mem_bytes: 0,
            },
            args: vec![
                Arg::Ptr(ids.p),
                (ids.nb[1] / 4).into(),
                (n_used as i32).into(),
                (n_tokens as i32).into(),
                (n_expert as i32).into(),
                Arg::Ptr(groups),
                Arg::Ptr(dst.p),
                (nrows as i32).into(),
            ],
        };
        let args = args_with(groups);
        // Every expert's column blocks as if it had all the pairs: those past its count return.
        let grid =
            (nrows.div_ceil(MMQ_ROWS) as u32, n_pairs.div_ceil(MMQ_COLS) as u32, n_expert as u32);
        let cfg =
            LaunchConfig { grid_dim: grid, block_dim: (MMQ_THREADS, 1, 1), shared_mem_bytes: 0 };
        Ok(vec![quantize, group, Pending { entry, cfg, args }])
    }
}
