//! Convolution building blocks, as ggml builds vision encoders: IM2COL (the patches a
//! convolution reads, one per row, so the convolution is one MUL_MAT) and POOL_2D, and
//! `conv_2d` from them (`ggml_conv_2d`).

use super::context::{shape_err, Context};
use super::desc::TensorId;
use super::op::{Op, PoolOp};
use crate::{DType, Result};

/// ggml's `ggml_calc_conv_output_size`.
fn conv_out(ins: usize, ks: usize, s: i32, p: i32, d: i32) -> i64 {
    (ins as i64 + 2 * i64::from(p) - i64::from(d) * (ks as i64 - 1) - 1) / i64::from(s) + 1
}

impl Context {
    /// The patches kernel `a` (`[KW, KH, IC, OC]`, 2-D; `[K, IC, OC]`, 1-D) reads from `b`
    /// (`[IW, IH, IC, N]`; `[IW, IC, N]`), one per row, in `dst_type` (F16 or F32)
    /// (`ggml_im2col`). Strides must be positive, dilations positive, paddings non-negative.
    #[allow(clippy::too_many_arguments)]
    pub fn im2col(
        &mut self,
        a: TensorId,
        b: TensorId,
        [s0, s1]: [i32; 2],
        [p0, p1]: [i32; 2],
        [d0, d1]: [i32; 2],
        is_2d: bool,
        dst_type: DType,
    ) -> Result<TensorId> {
        self.expect_type("IM2COL", b, &[DType::F32, DType::F16], "src1")?;
        if !matches!(dst_type, DType::F32 | DType::F16) {
            return Err(shape_err("IM2COL", format!("result type {dst_type}: F16 or F32")));
        }
        if s0 < 1 || s1 < 1 || d0 < 1 || d1 < 1 || p0 < 0 || p1 < 0 {
            return Err(shape_err(
                "IM2COL",
                format!("strides {s0},{s1}, paddings {p0},{p1}, dilations {d0},{d1}"),
            ));
        }
        let (ta, tb) = (self.get(a), self.get(b));
        let (ka, kb) = (ta.ne, tb.ne);
        let bad = |why: &str| {
            shape_err("IM2COL", format!("kernel {} on {}: {why}", ta.shape_str(), tb.shape_str()))
        };
        let ne = if is_2d {
            if ka[2] != kb[2] {
                return Err(bad("input channels differ"));
            }
            let oh = conv_out(kb[1], ka[1], s1, p1, d1);
            let ow = conv_out(kb[0], ka[0], s0, p0, d0);
            if oh < 1 || ow < 1 {
                return Err(bad("the kernel is larger than the image"));
            }
            [ka[2] * ka[1] * ka[0], ow as usize, oh as usize, kb[3]]
        } else {
            if ka[1] != kb[1] || kb[3] != 1 {
                return Err(bad("input channels differ"));
            }
            let ow = conv_out(kb[0], ka[0], s0, p0, d0);
            if ow < 1 {
                return Err(bad("the kernel is longer than the input"));
            }
            [ka[1] * ka[0], ow as usize, kb[2], 1]
        };
        let op = Op::Im2Col { s0, s1, p0, p1, d0, d1, is_2d };
        Ok(self.new_op(op, dst_type, ne, &[a, b]))
    }

    /// 2-D pooling of every `[ne0, ne1]` plane of `a` (F32 or F16) with a `k0 × k1` window
    /// (`ggml_pool_2d`): F32 `[(ne0 + 2p0 − k0)/s0 + 1, (ne1 + 2p1 − k1)/s1 + 1, ne2, ne3]`.
    #[allow(clippy::too_many_arguments)]
    pub fn pool_2d(
        &mut self,
        a: TensorId,
        op: PoolOp,
        [k0, k1]: [i32; 2],
        [s0, s1]: [i32; 2],
        [p0, p1]: [i32; 2],
    ) -> Result<TensorId> {
        self.expect_type("POOL_2D", a, &[DType::F32, DType::F16], "src0")?;
        let t = self.get(a);
        if k0 < 1 || k1 < 1 || s0 < 1 || s1 < 1 || p0 < 0 || p1 < 0 {
            return Err(shape_err(
                "POOL_2D",
                format!("kernel {k0}x{k1}, strides {s0},{s1}, paddings {p0},{p1}"),
            ));
        }
        let out = |ins: usize, k: i32, s: i32, p: i32| {
            (ins as i64 + 2 * i64::from(p) - i64::from(k)) / i64::from(s) + 1
        };
        let (w, h) = (out(t.ne[0], k0, s0, p0), out(t.ne[1], k1, s1, p1));
        if w < 1 || h < 1 {
            return Err(shape_err(
                "POOL_2D",
                format!("a {k0}x{k1} window does not fit {}", t.shape_str()),
            ));
        }
        let ne = [w as usize, h as usize, t.ne[2], t.ne[3]];
        Ok(self.new_op(Op::Pool2d { op, k0, k1, s0, s1, p0, p1 }, DType::F32, ne, &[a]))
    }

    /// A 2-D convolution of `b` (`[IW, IH, IC, N]`) by kernel `a` (`[KW, KH, IC, OC]`)
    /// (`ggml_conv_2d`): IM2COL to F16 (F32 for a BF16 kernel), one MUL_MAT with the patches
    /// as `src0`, the result `[OW, OH, OC, N]` (contiguous).
    pub fn conv_2d(
        &mut self,
        a: TensorId,
        b: TensorId,
        s: [i32; 2],
        p: [i32; 2],
        d: [i32; 2],
    ) -> Result<TensorId> {
        let ka = self.get(a).ne;
        let dst = if self.get(a).dtype == DType::BF16 { DType::F32 } else { DType::F16 };
        let cols = self.im2col(a, b, s, p, d, true, dst)?;
        let c = self.get(cols).ne;
        let lhs = self.reshape(cols, &[c[0], c[3] * c[2] * c[1]])?;
        let rhs = self.reshape(a, &[ka[0] * ka[1] * ka[2], ka[3]])?;
        let prod = self.mul_mat(lhs, rhs)?;
        let r = self.reshape(prod, &[c[1], c[2], c[3], ka[3]])?;
        let r = self.permute(r, [0, 1, 3, 2])?;
        self.cont(r, None)
    }
}
