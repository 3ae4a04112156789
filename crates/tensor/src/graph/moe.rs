//! Builder methods of the mixture-of-experts ops: the expert product (`MUL_MAT_ID`) and the
//! routing's sort (`ARGSORT`, and `argsort_top_k` on top of it), checked as ggml's constructors
//! assert them.

use super::context::{shape_err, Context};
use super::desc::TensorId;
use super::op::Op;
use super::ops::is_weight_type;
use crate::{DType, Result, TensorError};

impl Context {
    /// The expert product (`ggml_mul_mat_id`): `as_` holds one `[K, M]` matrix per expert
    /// (`[K, M, n_expert]`), `b` is `[K, n_b, n_tokens]` and `ids` I32 `[n_used, n_tokens]`
    /// with `n_used % n_b == 0`. The result is F32 `[M, n_used, n_tokens]`: row `(e, t)` is
    /// expert `ids[e, t]`'s matrix times row `(e % n_b, t)` of `b`.
    pub fn mul_mat_id(&mut self, as_: TensorId, b: TensorId, ids: TensorId) -> Result<TensorId> {
        self.expect_type("MUL_MAT_ID", ids, &[DType::I32], "ids")?;
        self.expect_type("MUL_MAT_ID", b, &[DType::F32], "src1")?;
        let (ta, tb, ti) = (self.get(as_), self.get(b), self.get(ids));
        let ok = ta.ne[3] == 1
            && tb.ne[3] == 1
            && ti.ne[2] == 1
            && ti.ne[3] == 1
            && ti.ne[1] == tb.ne[2]
            && ta.ne[0] == tb.ne[0]
            && tb.ne[1] != 0
            && ti.ne[0] % tb.ne[1] == 0;
        if !ok {
            return Err(shape_err(
                "MUL_MAT_ID",
                format!(
                    "experts {} cannot multiply {} by ids {}",
                    ta.shape_str(),
                    tb.shape_str(),
                    ti.shape_str()
                ),
            ));
        }
        if ta.is_transposed() {
            return Err(shape_err("MUL_MAT_ID", "src0 must not be transposed".into()));
        }
        if !is_weight_type(ta.dtype) {
            return Err(TensorError::OpType {
                op: "MUL_MAT_ID",
                dtype: ta.dtype,
                reason: "src0 must be a float or weight-quantized type".into(),
            });
        }
        let ne = [ta.ne[1], ti.ne[0], tb.ne[2], 1];
        Ok(self.new_op(Op::MulMatId, DType::F32, ne, &[as_, b, ids]))
    }

    /// A bias per chosen expert (`ggml_add_id`): `a` F32 `[n, n_used, n_tokens]`, `b` F32
    /// `[n, n_expert]` (one bias row per expert), `ids` I32 `[n_used, n_tokens]`; the result
    /// is `a` with row `(e, t)` plus `b`'s row `ids[e, t]`.
    pub fn add_id(&mut self, a: TensorId, b: TensorId, ids: TensorId) -> Result<TensorId> {
        self.expect_type("ADD_ID", a, &[DType::F32], "src0")?;
        self.expect_type("ADD_ID", b, &[DType::F32], "src1")?;
        self.expect_type("ADD_ID", ids, &[DType::I32], "ids")?;
        let (ta, tb, ti) = (self.get(a), self.get(b), self.get(ids));
        if ta.ne[0] != tb.ne[0] || ta.ne[1] != ti.ne[0] || ta.ne[2] != ti.ne[1] || ta.ne[3] != 1 {
            return Err(shape_err(
                "ADD_ID",
                format!(
                    "{} plus rows of {} picked by {}",
                    ta.shape_str(),
                    tb.shape_str(),
                    ti.shape_str()
                ),
            ));
        }
        let ne = ta.ne;
        Ok(self.new_op(Op::AddId, DType::F32, ne, &[a, b, ids]))
    }

    /// gpt-oss's clamped SwiGLU of `gate` and `up` (F32, same shape; `ggml_swiglu_oai`).
    pub fn swiglu_oai(
        &mut self,
        gate: TensorId,
        up: TensorId,
        alpha: f32,
        limit: f32,
    ) -> Result<TensorId> {
        self.expect_type("SWIGLU_OAI", gate, &[DType::F32], "gate")?;
        self.expect_type("SWIGLU_OAI", up, &[DType::F32], "up")?;
        let (tg, tu) = (self.get(gate), self.get(up));
        if tg.ne != tu.ne {
            return Err(shape_err(
                "SWIGLU_OAI",
                format!("gate {} and up {} differ", tg.shape_str(), tu.shape_str()),
            ));
        }
        let ne = tg.ne;
        Ok(self.new_op(Op::SwiGluOai { alpha, limit }, DType::F32, ne, &[gate, up]))
    }

    /// Attention sinks (`ggml_flash_attn_ext_add_sinks`, `ggml_soft_max_add_sinks`): a learned
    /// logit per head (F32 `[n_head]`) that joins every row's softmax without a value, as
    /// gpt-oss's attention has. `attn` is a FLASH_ATTN_EXT (sinks in its fifth source) or a
    /// SOFT_MAX over `[n_kv, n_q, n_head]` (its third).
    pub fn add_sinks(&mut self, attn: TensorId, sinks: TensorId) -> Result<()> {
        self.expect_type("SINKS", sinks, &[DType::F32], "sinks")?;
        let t = self.get(attn);
        let (slot, n_head) = match t.op {
            Op::FlashAttnExt { .. } => (4, t.src[0].map(|q| self.get(q).ne[2])),
            Op::SoftMax { .. } => (2, Some(t.ne[2])),
            other => {
                return Err(shape_err(
                    "SINKS",
                    format!("sinks join FLASH_ATTN_EXT or SOFT_MAX, not {}", other.name()),
                ))
            }
        };
        let ts = self.get(sinks);
        if Some(ts.ne[0]) != n_head || ts.n_elements() != ts.ne[0] {
            return Err(shape_err(
                "SINKS",
                format!("sinks {} for {n_head:?} heads", ts.shape_str()),
            ));
        }
        self.set_src(attn, slot, Some(sinks));
        Ok(())
    }

    /// The indexes that sort each row of the F32 `a` (`ggml_argsort`): I32 of `a`'s shape,
    /// largest value first when `descending`.
    pub fn argsort(&mut self, a: TensorId, descending: bool) -> Result<TensorId> {
        self.expect_type("ARGSORT", a, &[DType::F32], "src0")?;
        let ne = self.get(a).ne;
        Ok(self.new_op(Op::Argsort { descending }, DType::I32, ne, &[a]))
    }

    /// The indexes of the `k` largest values of each row, largest first (`ggml_argsort_top_k`:
    /// a descending argsort and a view of its first `k` columns, so the result's rows are
    /// strided).
    pub fn argsort_top_k(&mut self, a: TensorId, k: usize) -> Result<TensorId> {
        let ne = self.get(a).ne;
        if k == 0 || k > ne[0] {
            return Err(shape_err("ARGSORT", format!("top {k} of rows of {} values", ne[0])));
        }
        let sorted = self.argsort(a, true)?;
        let nb = self.get(sorted).nb;
        self.view(sorted, &[k, ne[1], ne[2], ne[3]], &nb[1..], 0)
    }
}
