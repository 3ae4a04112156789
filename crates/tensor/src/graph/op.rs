//! Ops and their parameters (`enum ggml_op` plus `op_params`, typed).

/// Unary element-wise ops (ggml's `GGML_OP_UNARY` sub-ops that the model graphs use).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UnaryOp {
    /// GELU, tanh approximation (ggml's `GELU`; the CPU uses an f16 table).
    Gelu,
    /// GELU with erf (`GELU_ERF`).
    GeluErf,
    /// `x * sigmoid(x)`.
    Silu,
    /// `tanh(x)`.
    Tanh,
}

/// Gated linear unit kinds (`GGML_OP_GLU` sub-ops).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GluOp {
    /// `silu(gate) * up`.
    SwiGlu,
    /// `gelu(gate) * up` (tanh GELU).
    GeGlu,
}

/// RoPE mode: which element pairs are rotated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RopeMode {
    /// Adjacent pairs `(x[2i], x[2i+1])` (ggml mode 0; LLaMA).
    Norm,
    /// Halves `(x[i], x[i + n_dims/2])` (ggml mode 2, GPT-NeoX; Qwen, Gemma).
    Neox,
    /// `ggml_rope_multi`'s M-RoPE (mode 8; Qwen2-VL's language model): NEOX pairs whose angles
    /// come from four positions per token (time, height, width, extra), pair `i` taking the
    /// position of the section `i mod Σsections` falls in.
    Mrope([i32; 4]),
    /// Interleaved M-RoPE (mode 40; Qwen3-VL): as `Mrope`, the sections taken in turn
    /// (t, h, w, t, h, w, ...).
    Imrope([i32; 4]),
    /// The vision tower's 2-D RoPE (mode 24; Qwen2-VL's ViT): `n_dims = head_dim / 2`, pairs
    /// `(x[i], x[i + n_dims])` over the whole row, each section's angles starting afresh.
    Vision([i32; 4]),
}

impl RopeMode {
    /// The sections of a multi-position mode (`None`: one position per token).
    pub fn sections(self) -> Option<[i32; 4]> {
        match self {
            RopeMode::Norm | RopeMode::Neox => None,
            RopeMode::Mrope(s) | RopeMode::Imrope(s) | RopeMode::Vision(s) => Some(s),
        }
    }
}

/// ROPE parameters (ggml's op_params of `ggml_rope_ext`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RopeParams {
    /// Rotated dimensions (the first `n_dims` of each head); the rest are copied.
    pub n_dims: usize,
    /// Pairing mode.
    pub mode: RopeMode,
    /// Original training context (YaRN).
    pub n_ctx_orig: usize,
    /// Base of the frequencies.
    pub freq_base: f32,
    /// Frequency scale (1 = none).
    pub freq_scale: f32,
    /// YaRN extrapolation mix factor (0 = off).
    pub ext_factor: f32,
    /// Magnitude scale of cos/sin.
    pub attn_factor: f32,
    /// YaRN low correction dim parameter.
    pub beta_fast: f32,
    /// YaRN high correction dim parameter.
    pub beta_slow: f32,
}

impl RopeParams {
    /// Plain RoPE without scaling: `freq_scale = 1`, `ext_factor = 0`, `attn_factor = 1`,
    /// `beta_fast = 32`, `beta_slow = 1` (llama.cpp's defaults).
    pub fn new(n_dims: usize, mode: RopeMode, freq_base: f32) -> Self {
        RopeParams {
            n_dims,
            mode,
            n_ctx_orig: 0,
            freq_base,
            freq_scale: 1.0,
            ext_factor: 0.0,
            attn_factor: 1.0,
            beta_fast: 32.0,
            beta_slow: 1.0,
        }
    }

    /// YaRN's correction dims, `ggml_rope_yarn_corr_dims`: computed in f32 exactly as ggml
    /// does, since their floor and ceil decide which dims are ramped.
    pub fn yarn_corr_dims(&self) -> [f32; 2] {
        let n_dims = self.n_dims as f32;
        let corr_dim = |n_rot: f32| {
            n_dims * (self.n_ctx_orig as f32 / (n_rot * 2.0 * std::f32::consts::PI)).ln()
                / (2.0 * self.freq_base.ln())
        };
        let start = corr_dim(self.beta_fast).floor();
        let end = corr_dim(self.beta_slow).ceil();
        [start.max(0.0), end.min(n_dims - 1.0)]
    }
}

/// An op with its parameters. Sources are in the tensor's `src` slots, in ggml's order.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Op {
    /// No op: a leaf (weights, inputs, constants).
    None,
    /// Rows of `src0` picked by the I32 indexes in `src1`.
    GetRows,
    /// `src0 + src1`, `src1` broadcast.
    Add,
    /// `src0 - src1`, `src1` broadcast.
    Sub,
    /// `src0 * src1`, `src1` broadcast.
    Mul,
    /// `src0 / src1`, `src1` broadcast.
    Div,
    /// Each row (of `ne[0]`, a power of two) times the orthonormal Walsh-Hadamard matrix of
    /// its size, as ggml's CPU computes a MUL_MAT hinted `GGML_HINT_SRC0_IS_HADAMARD` (the fast
    /// Walsh-Hadamard transform: the row scaled by `1/sqrt(n)` first, then `u + v`, `u − v`
    /// butterflies of doubling span). llama.cpp rotates Q, K and V with it where the KV cache
    /// is quantized. F32 result.
    Hadamard,
    /// `src0 * scale + bias`.
    Scale {
        /// Multiplier.
        scale: f32,
        /// Added after scaling.
        bias: f32,
    },
    /// `x / sqrt(mean(x^2) + eps)` per row.
    RmsNorm {
        /// Epsilon.
        eps: f32,
    },
    /// `(x - mean) / sqrt(var + eps)` per row.
    Norm {
        /// Epsilon.
        eps: f32,
    },
    /// `dst[i1][i0] = dot(src0 row i0, src1 row i1)`, src0 broadcast over dims 2 and 3.
    MulMat,
    /// Rotary embedding of `src0` at the I32 positions `src1`, optional frequency factors `src2`.
    Rope(RopeParams),
    /// `softmax(src0 * scale + mask * slope)` per row; optional mask `src1`.
    SoftMax {
        /// Multiplier of the logits.
        scale: f32,
        /// ALiBi maximum bias (0 = off).
        max_bias: f32,
    },
    /// Copy `src0` into `src1`'s storage (converting type); the result is a view of `src1`.
    Cpy,
    /// A contiguous copy of `src0`.
    Cont,
    /// A copy of `src0` with the same layout.
    Dup,
    /// Rows of `src1` written into `src0` at the row indexes `src2`; the result is a view of `src0`.
    SetRows,
    /// Element-wise unary function.
    Unary(UnaryOp),
    /// Gated unit: fused (`src0` holds gate and up halves) or split (`src0` gate, `src1` up).
    Glu {
        /// Which activation.
        op: GluOp,
        /// Fused form only: the second half is the gate.
        swapped: bool,
    },
    /// Attention `softmax(q·kᵀ * scale + mask) · v` without materializing the scores.
    FlashAttnExt {
        /// Multiplier of q·k.
        scale: f32,
        /// ALiBi maximum bias.
        max_bias: f32,
        /// Logit soft-capping (0 = off).
        softcap: f32,
    },
    /// A strided view of `view_src`.
    View,
    /// The same data with another shape (contiguous source).
    Reshape,
    /// Axes permuted: source axis `i` becomes axis `axes[i]`.
    Permute {
        /// ggml's permutation.
        axes: [usize; 4],
    },
    /// Axes 0 and 1 swapped.
    Transpose,
    /// `src0` and `src1` joined along `dim`.
    Concat {
        /// The axis.
        dim: usize,
    },
    /// Sum of each row.
    SumRows,
    /// Index of the largest value of each row (I32).
    Argmax,
    /// `dst[:, e, t] = src0[:, :, ids[e, t]] · src1[:, e % ne11, t]`: for each token `t` the
    /// expert matrices its I32 ids (`src2`) name (ggml's `MUL_MAT_ID`, the mixture-of-experts
    /// product).
    MulMatId,
    /// The indexes that sort each row (I32), largest first when `descending` (`ggml_argsort`).
    Argsort {
        /// Largest value first.
        descending: bool,
    },
    /// `src0[:, e, t] + src1[:, ids[e, t]]`: a bias per chosen expert (`ggml_add_id`; ids in
    /// `src2`).
    AddId,
    /// gpt-oss's clamped SwiGLU, split form (`ggml_swiglu_oai`): with `x = min(gate, limit)`
    /// and `y = clamp(up, -limit, limit)`, `x / (1 + exp(-alpha·x)) · (y + 1)`.
    SwiGluOai {
        /// Sigmoid sharpness (1.702 in gpt-oss).
        alpha: f32,
        /// Clamp of both halves (7 in gpt-oss).
        limit: f32,
    },
    /// Each value clamped to `[min, max]` (`ggml_clamp`).
    Clamp {
        /// Lower bound.
        min: f32,
        /// Upper bound.
        max: f32,
    },
    /// The patches a convolution with kernel `src0` reads from image `src1`, one per row
    /// (`ggml_im2col`): 2-D `[IC·KH·KW, OW, OH, N]` from `src1` `[IW, IH, IC, N]`, 1-D
    /// `[IC·K, OW, N, 1]` from `[IW, IC, N, 1]`; cells outside the image are 0.
    Im2Col {
        /// Stride in x, in y.
        s0: i32,
        /// See `s0`.
        s1: i32,
        /// Padding in x, in y.
        p0: i32,
        /// See `p0`.
        p1: i32,
        /// Dilation in x, in y.
        d0: i32,
        /// See `d0`.
        d1: i32,
        /// 2-D (else 1-D).
        is_2d: bool,
    },
    /// 2-D pooling of each `[ne0, ne1]` plane (`ggml_pool_2d`), F32 out.
    Pool2d {
        /// Average or maximum.
        op: PoolOp,
        /// Kernel width, height.
        k0: i32,
        /// See `k0`.
        k1: i32,
        /// Stride in x, in y.
        s0: i32,
        /// See `s0`.
        s1: i32,
        /// Padding in x, in y (ggml keeps them as integers).
        p0: i32,
        /// See `p0`.
        p1: i32,
    },
}

/// How POOL_2D combines a window (`ggml_op_pool`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolOp {
    /// The window's sum over the kernel's area (padding included, as ggml).
    Avg,
    /// The window's largest value.
    Max,
}

impl Op {
    /// ggml's name for the op (`ggml_op_desc`).
    pub fn name(&self) -> &'static str {
        match self {
            Op::None => "NONE",
            Op::GetRows => "GET_ROWS",
            Op::Add => "ADD",
            Op::Sub => "SUB",
            Op::Mul => "MUL",
            Op::Div => "DIV",
            Op::Scale { .. } => "SCALE",
            Op::Hadamard => "HADAMARD",
            Op::RmsNorm { .. } => "RMS_NORM",
            Op::Norm { .. } => "NORM",
            Op::MulMat => "MUL_MAT",
            Op::Rope(_) => "ROPE",
            Op::SoftMax { .. } => "SOFT_MAX",
            Op::Cpy => "CPY",
            Op::Cont => "CONT",
            Op::Dup => "DUP",
            Op::SetRows => "SET_ROWS",
            Op::Unary(UnaryOp::Gelu) => "GELU",
            Op::Unary(UnaryOp::GeluErf) => "GELU_ERF",
            Op::Unary(UnaryOp::Silu) => "SILU",
            Op::Unary(UnaryOp::Tanh) => "TANH",
            Op::Glu { op: GluOp::SwiGlu, .. } => "SWIGLU",
            Op::Glu { op: GluOp::GeGlu, .. } => "GEGLU",
            Op::FlashAttnExt { .. } => "FLASH_ATTN_EXT",
            Op::View => "VIEW",
            Op::Reshape => "RESHAPE",
            Op::Permute { .. } => "PERMUTE",
            Op::Transpose => "TRANSPOSE",
            Op::Concat { .. } => "CONCAT",
            Op::SumRows => "SUM_ROWS",
            Op::Argmax => "ARGMAX",
            Op::MulMatId => "MUL_MAT_ID",
            Op::Argsort { .. } => "ARGSORT",
            Op::Clamp { .. } => "CLAMP",
            Op::AddId => "ADD_ID",
            Op::SwiGluOai { .. } => "SWIGLU_OAI",
            Op::Im2Col { .. } => "IM2COL",
            Op::Pool2d { .. } => "POOL_2D",
        }
    }

    /// Whether the op only reinterprets its source's data (no compute, no storage of its own).
    pub fn is_view(&self) -> bool {
        matches!(self, Op::View | Op::Reshape | Op::Permute { .. } | Op::Transpose)
    }

    /// Whether a backend may write the result over `src0` when `src0` dies at this node (ggml's
    /// `ggml_op_can_inplace`).
    pub fn can_inplace(&self) -> bool {
        matches!(
            self,
            Op::Add
                | Op::Sub
                | Op::Mul
                | Op::Div
                | Op::Scale { .. }
                | Op::Unary(_)
                | Op::Rope(_)
                | Op::RmsNorm { .. }
                | Op::SoftMax { .. }
        )
    }
}
