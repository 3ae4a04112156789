//! Builder methods for the compute ops, each checking shapes and types as ggml's constructors
//! assert them, returning a typed error instead of aborting.

use super::context::{ne4, shape_err, Context};
use super::desc::TensorId;
use super::op::{GluOp, Op, RopeMode, RopeParams, UnaryOp};
use crate::{DType, Result, TensorError};

fn type_err(op: &'static str, dtype: DType, reason: &str) -> TensorError {
    TensorError::OpType { op, dtype, reason: reason.to_string() }
}

/// Whether a product's weights may be of `dtype`: a float or weight-quantized type (not the
/// activation-only Q8_1/Q8_K, the integers or F64).
pub(super) fn is_weight_type(dtype: DType) -> bool {
    dtype.is_supported()
        && !matches!(
            dtype,
            DType::Q8_1
                | DType::Q8_K
                | DType::I8
                | DType::I16
                | DType::I32
                | DType::I64
                | DType::F64
        )
}

/// Whether `b` can be broadcast (repeated) to `a`'s shape (`ggml_can_repeat`).
fn can_repeat(b: &[usize; 4], a: &[usize; 4]) -> bool {
    b.iter().zip(a).all(|(&nb, &na)| nb != 0 && na % nb == 0)
}

impl Context {
    pub(super) fn expect_type(
        &self,
        op: &'static str,
        t: TensorId,
        allowed: &[DType],
        which: &str,
    ) -> Result<()> {
        let d = self.get(t).dtype;
        if allowed.contains(&d) {
            Ok(())
        } else {
            Err(type_err(op, d, &format!("{which} must be one of {allowed:?}")))
        }
    }

    fn binary(&mut self, op: Op, a: TensorId, b: TensorId) -> Result<TensorId> {
        let (ta, tb) = (self.get(a), self.get(b));
        if !can_repeat(&tb.ne, &ta.ne) {
            return Err(shape_err(
                op.name(),
                format!("{} cannot be broadcast to {}", tb.shape_str(), ta.shape_str()),
            ));
        }
        let float = [DType::F32, DType::F16, DType::BF16];
        self.expect_type(op.name(), a, &float, "src0")?;
        self.expect_type(op.name(), b, &float, "src1")?;
        let (dtype, ne) = (ta.dtype, ta.ne);
        Ok(self.new_op(op, dtype, ne, &[a, b]))
    }

    /// `a + b`, `b` broadcast over `a` (`ggml_add`).
    pub fn add(&mut self, a: TensorId, b: TensorId) -> Result<TensorId> {
        self.binary(Op::Add, a, b)
    }
    /// `a - b`, `b` broadcast over `a`.
    pub fn sub(&mut self, a: TensorId, b: TensorId) -> Result<TensorId> {
        self.binary(Op::Sub, a, b)
    }
    /// `a * b` element-wise, `b` broadcast over `a`.
    pub fn mul(&mut self, a: TensorId, b: TensorId) -> Result<TensorId> {
        self.binary(Op::Mul, a, b)
    }
    /// `a / b` element-wise, `b` broadcast over `a`.
    pub fn div(&mut self, a: TensorId, b: TensorId) -> Result<TensorId> {
        self.binary(Op::Div, a, b)
    }

    fn unary_like(&mut self, op: Op, a: TensorId, allowed: &[DType]) -> Result<TensorId> {
        self.expect_type(op.name(), a, allowed, "src0")?;
        let t = self.get(a);
        let (dtype, ne) = (t.dtype, t.ne);
        Ok(self.new_op(op, dtype, ne, &[a]))
    }

    /// `a * scale + bias` (`ggml_scale_bias`).
    pub fn scale(&mut self, a: TensorId, scale: f32, bias: f32) -> Result<TensorId> {
        self.unary_like(Op::Scale { scale, bias }, a, &[DType::F32])
    }

    /// Each row of `a` (F32 or F16, contiguous, rows of a power of two ≥ 2 values) times the
    /// orthonormal Walsh-Hadamard matrix ([`Op::Hadamard`]); F32, `a`'s shape.
    pub fn hadamard(&mut self, a: TensorId) -> Result<TensorId> {
        self.expect_type("HADAMARD", a, &[DType::F32, DType::F16], "src0")?;
        let t = self.get(a);
        let n = t.ne[0];
        if n < 2 || !n.is_power_of_two() || !t.is_contiguous() {
            return Err(shape_err(
                "HADAMARD",
                format!(
                    "rows of a power of two (>= 2) contiguous values, got {:?}{}",
                    t.ne,
                    if t.is_contiguous() { "" } else { " (not contiguous)" }
                ),
            ));
        }
        let ne = t.ne;
        Ok(self.new_op(Op::Hadamard, DType::F32, ne, &[a]))
    }

    /// Each value clamped to `[min, max]` (`ggml_clamp`).
    pub fn clamp(&mut self, a: TensorId, min: f32, max: f32) -> Result<TensorId> {
        self.unary_like(Op::Clamp { min, max }, a, &[DType::F32])
    }

    /// RMS normalization of each row (`ggml_rms_norm`).
    pub fn rms_norm(&mut self, a: TensorId, eps: f32) -> Result<TensorId> {
        self.unary_like(Op::RmsNorm { eps }, a, &[DType::F32])
    }

    /// Mean/variance normalization of each row (`ggml_norm`).
    pub fn norm(&mut self, a: TensorId, eps: f32) -> Result<TensorId> {
        self.unary_like(Op::Norm { eps }, a, &[DType::F32])
    }

    /// An element-wise function (`ggml_gelu`, `ggml_silu`, ...).
    pub fn unary(&mut self, a: TensorId, op: UnaryOp) -> Result<TensorId> {
        self.unary_like(Op::Unary(op), a, &[DType::F32, DType::F16])
    }

    /// `a · bᵀ` as ggml: `a` is `[K, M, ne2, ne3]` (weights, any type with a dot product),
    /// `b` is `[K, N, ne12, ne13]` with `ne12 % ne2 == 0` and `ne13 % ne3 == 0`; the result is F32
    /// `[M, N, ne12, ne13]`.
    pub fn mul_mat(&mut self, a: TensorId, b: TensorId) -> Result<TensorId> {
        let (ta, tb) = (self.get(a), self.get(b));
        if ta.ne[0] != tb.ne[0] || tb.ne[2] % ta.ne[2] != 0 || tb.ne[3] % ta.ne[3] != 0 {
            return Err(shape_err(
                "MUL_MAT",
                format!("cannot multiply {} by {}", ta.shape_str(), tb.shape_str()),
            ));
        }
        if ta.is_transposed() {
            return Err(shape_err("MUL_MAT", "src0 must not be transposed".into()));
        }
        if !is_weight_type(ta.dtype) {
            return Err(type_err(
                "MUL_MAT",
                ta.dtype,
                "src0 must be a float or weight-quantized type",
            ));
        }
        self.expect_type("MUL_MAT", b, &[DType::F32, DType::F16, DType::BF16], "src1")?;
        let ne = [ta.ne[1], tb.ne[1], tb.ne[2], tb.ne[3]];
        Ok(self.new_op(Op::MulMat, DType::F32, ne, &[a, b]))
    }

    /// Rows of `a` picked by the I32 indexes `b` (`ggml_get_rows`): `a` is `[n, rows, ne2, ne3]`,
    /// `b` is `[k, ne2, ne3]`; the result is F32 `[n, k, ne2, ne3]` (I32 for I32 `a`).
    pub fn get_rows(&mut self, a: TensorId, b: TensorId) -> Result<TensorId> {
        self.expect_type("GET_ROWS", b, &[DType::I32], "indexes")?;
        let (ta, tb) = (self.get(a), self.get(b));
        if ta.ne[2] != tb.ne[1] || ta.ne[3] != tb.ne[2] || tb.ne[3] != 1 {
            return Err(shape_err(
                "GET_ROWS",
                format!("indexes {} do not match {}", tb.shape_str(), ta.shape_str()),
            ));
        }
        if !crate::quant::can_dequantize(ta.dtype) {
            return Err(type_err("GET_ROWS", ta.dtype, "no dequantizer for src0"));
        }
        let dtype = if ta.dtype == DType::I32 { DType::I32 } else { DType::F32 };
        let ne = [ta.ne[0], tb.ne[0], tb.ne[1], tb.ne[2]];
        Ok(self.new_op(Op::GetRows, dtype, ne, &[a, b]))
    }

    /// Rotary position embedding (`ggml_rope_ext`, and `ggml_rope_multi` for the multi-position
    /// modes): `a` is `[head_dim, n_head, n_tokens, 1]`, `pos` I32 `[n_tokens]` (`[4·n_tokens]`
    /// for [`RopeMode::sections`]: all first components, then all second ...), optional
    /// `freq_factors` F32 `[n_dims / 2]`.
    pub fn rope(
        &mut self,
        a: TensorId,
        pos: TensorId,
        freq_factors: Option<TensorId>,
        p: RopeParams,
    ) -> Result<TensorId> {
        self.expect_type("ROPE", a, &[DType::F32, DType::F16], "src0")?;
        self.expect_type("ROPE", pos, &[DType::I32], "positions")?;
        let (ta, tp) = (self.get(a), self.get(pos));
        let per_token = if p.mode.sections().is_some() { 4 } else { 1 };
        if tp.ne[0] != per_token * ta.ne[2] || tp.n_elements() != tp.ne[0] {
            return Err(shape_err(
                "ROPE",
                format!("positions {} do not match {}", tp.shape_str(), ta.shape_str()),
            ));
        }
        if p.n_dims == 0 || p.n_dims % 2 != 0 || p.n_dims > ta.ne[0] {
            return Err(shape_err(
                "ROPE",
                format!("n_dims {} must be even and at most {}", p.n_dims, ta.ne[0]),
            ));
        }
        if let Some(s) = p.mode.sections() {
            let sum: i64 = s.iter().map(|&x| i64::from(x)).sum();
            if s.iter().any(|&x| x < 0) || s[..3].iter().all(|&x| x == 0) || sum > ta.ne[0] as i64 {
                return Err(shape_err(
                    "ROPE",
                    format!("sections {s:?}: non-negative, one of the first three positive, at most {} in all", ta.ne[0]),
                ));
            }
            if matches!(p.mode, RopeMode::Vision(_)) && p.n_dims * 2 != ta.ne[0] {
                return Err(shape_err(
                    "ROPE",
                    format!(
                        "vision RoPE rotates half the row: n_dims {} of {}",
                        p.n_dims, ta.ne[0]
                    ),
                ));
            }
        }
        if let Some(f) = freq_factors {
            self.expect_type("ROPE", f, &[DType::F32], "freq_factors")?;
            if self.get(f).ne[0] < p.n_dims / 2 {
                return Err(shape_err(
                    "ROPE",
                    format!(
                        "freq_factors has {} values, needs {}",
                        self.get(f).ne[0],
                        p.n_dims / 2
                    ),
                ));
            }
        }
        let (dtype, ne) = (ta.dtype, ta.ne);
        let id = self.new_op(Op::Rope(p), dtype, ne, &[a, pos]);
        self.set_src(id, 2, freq_factors);
        Ok(id)
    }

    /// `softmax(a * scale + mask * slope)` per row (`ggml_soft_max_ext`); `mask` (F16 or F32) is
    /// `[ne0, >= ne1, ne2 | 1, ne3 | 1]`, broadcast over heads.
    pub fn soft_max(
        &mut self,
        a: TensorId,
        mask: Option<TensorId>,
        scale: f32,
        max_bias: f32,
    ) -> Result<TensorId> {
        self.expect_type("SOFT_MAX", a, &[DType::F32], "src0")?;
        if let Some(m) = mask {
            self.expect_type("SOFT_MAX", m, &[DType::F16, DType::F32], "mask")?;
            let (ta, tm) = (self.get(a), self.get(m));
            if tm.ne[0] != ta.ne[0]
                || tm.ne[1] < ta.ne[1]
                || ta.ne[2] % tm.ne[2] != 0
                || ta.ne[3] % tm.ne[3] != 0
            {
                return Err(shape_err(
                    "SOFT_MAX",
                    format!("mask {} does not fit {}", tm.shape_str(), ta.shape_str()),
                ));
            }
        }
        let ne = self.get(a).ne;
        let id = self.new_op(Op::SoftMax { scale, max_bias }, DType::F32, ne, &[a]);
        self.set_src(id, 1, mask);
        Ok(id)
    }

    /// Copies `a` into `b`'s storage, converting to `b`'s type (`ggml_cpy`); the result is a view
    /// of `b`. Element counts must match.
    pub fn cpy(&mut self, a: TensorId, b: TensorId) -> Result<TensorId> {
        let (ta, tb) = (self.get(a), self.get(b));
        if ta.n_elements() != tb.n_elements() {
            return Err(shape_err(
                "CPY",
                format!("{} and {} differ in element count", ta.shape_str(), tb.shape_str()),
            ));
        }
        if ta.dtype.is_quantized() && ta.dtype != tb.dtype {
            return Err(type_err(
                "CPY",
                ta.dtype,
                "a quantized source can only be copied to its own type",
            ));
        }
        if !crate::quant::can_quantize(tb.dtype) {
            return Err(type_err("CPY", tb.dtype, "no quantizer for the destination type"));
        }
        let (ne, nb) = (tb.ne, tb.nb);
        let id = self.new_view(Op::Cpy, b, ne, nb, 0);
        self.set_src(id, 0, Some(a));
        self.set_src(id, 1, Some(b));
        Ok(id)
    }

    /// A contiguous copy of `a` with shape `ne` (`ggml_cont_4d`; `ne = a.ne` for `ggml_cont`).
    pub fn cont(&mut self, a: TensorId, ne: Option<&[usize]>) -> Result<TensorId> {
        let ta = self.get(a);
        let ne = match ne {
            Some(ne) => ne4("CONT", ne)?,
            None => ta.ne,
        };
        if ne.iter().product::<usize>() != ta.n_elements() {
            return Err(shape_err("CONT", format!("{} cannot become {ne:?}", ta.shape_str())));
        }
        let dtype = ta.dtype;
        Ok(self.new_op(Op::Cont, dtype, ne, &[a]))
    }

    /// A copy of `a` (`ggml_dup`).
    pub fn dup(&mut self, a: TensorId) -> Result<TensorId> {
        let t = self.get(a);
        let (dtype, ne) = (t.dtype, t.ne);
        Ok(self.new_op(Op::Dup, dtype, ne, &[a]))
    }

    /// Writes the rows of `b` (F32) into `a` at the row indexes `idx` (I32 or I64), converting to
    /// `a`'s type (`ggml_set_rows`); the result is a view of `a`.
    pub fn set_rows(&mut self, a: TensorId, b: TensorId, idx: TensorId) -> Result<TensorId> {
        self.expect_type("SET_ROWS", b, &[DType::F32], "src1")?;
        self.expect_type("SET_ROWS", idx, &[DType::I32, DType::I64], "indexes")?;
        let (ta, tb, ti) = (self.get(a), self.get(b), self.get(idx));
        if ta.ne[0] != tb.ne[0]
            || tb.ne[1] != ti.ne[0]
            || tb.ne[2] % ti.ne[1] != 0
            || tb.ne[3] % ti.ne[2] != 0
            || ti.ne[3] != 1
            || tb.ne[2] != ta.ne[2]
            || tb.ne[3] != ta.ne[3]
        {
            return Err(shape_err(
                "SET_ROWS",
                format!(
                    "rows {} at {} do not fit {}",
                    tb.shape_str(),
                    ti.shape_str(),
                    ta.shape_str()
                ),
            ));
        }
        if !crate::quant::can_quantize(ta.dtype) {
            return Err(type_err("SET_ROWS", ta.dtype, "no quantizer for the destination type"));
        }
        let (ne, nb) = (ta.ne, ta.nb);
        let id = self.new_view(Op::SetRows, a, ne, nb, 0);
        self.set_src(id, 0, Some(a));
        self.set_src(id, 1, Some(b));
        self.set_src(id, 2, Some(idx));
        Ok(id)
    }

    /// Fused gated unit (`ggml_swiglu`, `ggml_geglu`): the first half of each row of `a` is the
    /// gate (the second when `swapped`), the other half the value; the result is half as wide.
    pub fn glu(&mut self, a: TensorId, op: GluOp, swapped: bool) -> Result<TensorId> {
        self.expect_type("GLU", a, &[DType::F32, DType::F16], "src0")?;
        let t = self.get(a);
        if t.ne[0] % 2 != 0 {
            return Err(shape_err("GLU", format!("row length {} is odd", t.ne[0])));
        }
        let mut ne = t.ne;
        ne[0] /= 2;
        let dtype = t.dtype;
        Ok(self.new_op(Op::Glu { op, swapped }, dtype, ne, &[a]))
    }

    /// Split gated unit (`ggml_swiglu_split`): `act(gate) * up`, both of one shape.
    pub fn glu_split(&mut self, gate: TensorId, up: TensorId, op: GluOp) -> Result<TensorId> {
        self.expect_type("GLU", gate, &[DType::F32, DType::F16], "gate")?;
        let (tg, tu) = (self.get(gate), self.get(up));
        if tg.ne != tu.ne || tg.dtype != tu.dtype {
            return Err(shape_err(
                "GLU",
                format!("gate {} and up {} differ", tg.shape_str(), tu.shape_str()),
            ));
        }
        let (dtype, ne) = (tg.dtype, tg.ne);
        Ok(self.new_op(Op::Glu { op, swapped: false }, dtype, ne, &[gate, up]))
    }

    /// Flash attention (`ggml_flash_attn_ext`): `q` F32 `[D, n_q, H, ne3]`, `k` `[D, n_kv, H_kv,
    /// ne3]`, `v` `[Dv, n_kv, H_kv, ne3]` (K and V F32/F16/BF16/Q8_0/Q4_0...), `H % H_kv == 0`;
    /// optional F16 mask `[n_kv, >= n_q]`. The result is F32 `[Dv, H, n_q, ne3]` (heads and tokens
    /// swapped, as ggml).
    #[allow(clippy::too_many_arguments)] // mirrors ggml_flash_attn_ext
    pub fn flash_attn_ext(
        &mut self,
        q: TensorId,
        k: TensorId,
        v: TensorId,
        mask: Option<TensorId>,
        scale: f32,
        max_bias: f32,
        softcap: f32,
    ) -> Result<TensorId> {
        self.expect_type("FLASH_ATTN_EXT", q, &[DType::F32], "q")?;
        let (tq, tk, tv) = (self.get(q), self.get(k), self.get(v));
        if tk.ne[0] != tq.ne[0]
            || tv.ne[1] != tk.ne[1]
            || tk.ne[2] != tv.ne[2]
            || tq.ne[2] % tk.ne[2] != 0
            || tk.ne[3] != tq.ne[3]
            || tv.ne[3] != tq.ne[3]
        {
            return Err(shape_err(
                "FLASH_ATTN_EXT",
                format!(
                    "q {} k {} v {} do not fit",
                    tq.shape_str(),
                    tk.shape_str(),
                    tv.shape_str()
                ),
            ));
        }
        for (t, which) in [(k, "k"), (v, "v")] {
            if !crate::quant::can_dequantize(self.get(t).dtype) {
                return Err(type_err("FLASH_ATTN_EXT", self.get(t).dtype, which));
            }
        }
        if let Some(m) = mask {
            self.expect_type("FLASH_ATTN_EXT", m, &[DType::F16, DType::F32], "mask")?;
            let (tm, tq, tk) = (self.get(m), self.get(q), self.get(k));
            if tm.ne[0] != tk.ne[1]
                || tm.ne[1] < tq.ne[1]
                || tq.ne[2] % tm.ne[2] != 0
                || tq.ne[3] % tm.ne[3] != 0
            {
                return Err(shape_err(
                    "FLASH_ATTN_EXT",
                    format!(
                        "mask {} does not fit q {} and k {}",
                        tm.shape_str(),
                        tq.shape_str(),
                        tk.shape_str()
                    ),
                ));
            }
        }
        let (tq, tv) = (self.get(q), self.get(v));
        let ne = [tv.ne[0], tq.ne[2], tq.ne[1], tq.ne[3]];
        let id =
            self.new_op(Op::FlashAttnExt { scale, max_bias, softcap }, DType::F32, ne, &[q, k, v]);
        self.set_src(id, 3, mask);
        Ok(id)
    }

    /// `a` and `b` joined along `dim` (`ggml_concat`); other dims must match.
    pub fn concat(&mut self, a: TensorId, b: TensorId, dim: usize) -> Result<TensorId> {
        let (ta, tb) = (self.get(a), self.get(b));
        if dim >= 4 || ta.dtype != tb.dtype || (0..4).any(|i| i != dim && ta.ne[i] != tb.ne[i]) {
            return Err(shape_err(
                "CONCAT",
                format!("cannot join {} and {} along {dim}", ta.shape_str(), tb.shape_str()),
            ));
        }
        let mut ne = ta.ne;
        ne[dim] += tb.ne[dim];
        let dtype = ta.dtype;
        Ok(self.new_op(Op::Concat { dim }, dtype, ne, &[a, b]))
    }

    /// Sum of each row (`ggml_sum_rows`): `[1, ne1, ne2, ne3]`.
    pub fn sum_rows(&mut self, a: TensorId) -> Result<TensorId> {
        self.expect_type("SUM_ROWS", a, &[DType::F32], "src0")?;
        let mut ne = self.get(a).ne;
        ne[0] = 1;
        Ok(self.new_op(Op::SumRows, DType::F32, ne, &[a]))
    }

    /// Index of the largest value of each row of a matrix (`ggml_argmax`): I32 `[ne1]`.
    pub fn argmax(&mut self, a: TensorId) -> Result<TensorId> {
        self.expect_type("ARGMAX", a, &[DType::F32], "src0")?;
        let t = self.get(a);
        if t.ne[2] != 1 || t.ne[3] != 1 {
            return Err(shape_err("ARGMAX", format!("{} is not a matrix", t.shape_str())));
        }
        let ne = [t.ne[1], 1, 1, 1];
        Ok(self.new_op(Op::Argmax, DType::I32, ne, &[a]))
    }
}
