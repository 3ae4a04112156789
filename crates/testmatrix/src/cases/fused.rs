//! Small graphs shaped as a decoder block builds them, for the windows a backend may run as one
//! kernel (the CUDA backend's fusion windows): each checks the fused kernels against the f64
//! reference of the unfused nodes, as the single-op cases check the plain kernels.

use crate::case::{Builder, CaseSpec};
use crate::compare::{thresholds, Tolerance};
use crate::init::{default_init, Init};
use tessera_tensor::graph::{RopeMode, RopeParams, TensorId};
use tessera_tensor::{DType, TensorError};

/// Two or three products of the same `cols` activation columns by weights of one type (a
/// block's Q, K and V; `rows[2]` 0 for two), pinned so they follow one another in the node list
/// (the CUDA backend's product group), with `bias` each plus a bias row (ADD, Qwen2's), the ADDs
/// pinned after them; the output is their rows one after another (CONCAT).
#[derive(Debug, Clone)]
pub struct Products {
    /// Weight type.
    pub w: DType,
    /// Dot product length.
    pub k: usize,
    /// Output rows of each product (the third 0 for two products).
    pub rows: [usize; 3],
    /// Activation columns.
    pub cols: usize,
    /// A bias added to each product.
    pub bias: bool,
}

impl CaseSpec for Products {
    fn op(&self) -> &'static str {
        "MUL_MAT_GROUP"
    }
    fn dtype(&self) -> String {
        format!("{}{}", self.w.name(), if self.bias { ",bias" } else { "" })
    }
    fn build(&self, b: &mut Builder) -> Result<TensorId, TensorError> {
        let x = b.leaf(DType::F32, &[self.k, self.cols], default_init(DType::F32))?;
        let mut out: Option<TensorId> = None;
        let mut products = Vec::new();
        for &m in self.rows.iter().filter(|&&m| m > 0) {
            let w = b.leaf(self.w, &[self.k, m], default_init(self.w))?;
            products.push(b.ctx.mul_mat(w, x)?);
        }
        b.pins.extend(&products);
        if self.bias {
            for p in products.iter_mut() {
                let m = b.ctx.get(*p).ne[0];
                let bias = b.leaf(DType::F32, &[m], Init::Uniform { min: -1.0, max: 1.0 })?;
                *p = b.ctx.add(*p, bias)?;
            }
            b.pins.extend(&products);
        }
        for p in products {
            out = Some(match out {
                Some(o) => b.ctx.concat(o, p, 0)?,
                None => p,
            });
        }
        Ok(out.expect("at least one product"))
    }
    fn tolerance(&self) -> Tolerance {
        Tolerance::Nmse(thresholds::MUL_MAT)
    }
}

/// RMS_NORM (after a residual ADD with `residual`) times a weight row, then `products` (1 or 2,
/// pinned together) of the normed columns by `w` weights: a block's attention or FFN input,
/// where the CUDA backend's fused norm writes the products' Q8_1 activations itself.
#[derive(Debug, Clone)]
pub struct NormProducts {
    /// Weight type.
    pub w: DType,
    /// Row length (the norm's and the products').
    pub k: usize,
    /// Output rows of each product.
    pub m: usize,
    /// Columns.
    pub cols: usize,
    /// The residual ADD before the norm.
    pub residual: bool,
    /// Products of the normed columns (1 or 2).
    pub products: usize,
}

impl CaseSpec for NormProducts {
    fn op(&self) -> &'static str {
        "NORM_MUL_MAT"
    }
    fn dtype(&self) -> String {
        format!("{}{}", self.w.name(), if self.residual { ",add" } else { "" })
    }
    fn build(&self, b: &mut Builder) -> Result<TensorId, TensorError> {
        let unit = Init::Uniform { min: -1.0, max: 1.0 };
        let mut a = b.leaf(DType::F32, &[self.k, self.cols], unit)?;
        if self.residual {
            // The residual stream is an intermediate (a block's output), read only by the ADD:
            // laid out by the graph allocator, the sum takes its memory (ADD in place), as in
            // a model.
            a = b.ctx.scale(a, 1.0, 0.0)?;
            let r = b.leaf(DType::F32, &[self.k, self.cols], unit)?;
            a = b.ctx.add(a, r)?;
        }
        let g = b.leaf(DType::F32, &[self.k], Init::Uniform { min: 0.5, max: 1.5 })?;
        let n = b.ctx.rms_norm(a, 1e-6)?;
        let h = b.ctx.mul(n, g)?;
        let mut products = Vec::new();
        for _ in 0..self.products.max(1) {
            let w = b.leaf(self.w, &[self.k, self.m], default_init(self.w))?;
            products.push(b.ctx.mul_mat(w, h)?);
        }
        b.pins.extend(&products);
        let mut out = products[0];
        for &p in &products[1..] {
            out = b.ctx.concat(out, p, 0)?;
        }
        Ok(out)
    }
    fn tolerance(&self) -> Tolerance {
        Tolerance::Nmse(thresholds::MUL_MAT)
    }
}

/// K `[head_dim, heads, tokens]` rotated (ROPE), reshaped to one row a token and written into
/// rows of a `cells`-row cache of type `cache` (SET_ROWS at distinct indexes): the CUDA
/// backend's RoPE-into-the-cache kernel. The output is the whole cache (its other rows as they
/// were).
#[derive(Debug, Clone)]
pub struct RopeIntoCache {
    /// Head size.
    pub head_dim: usize,
    /// KV heads.
    pub heads: usize,
    /// Tokens.
    pub tokens: usize,
    /// Cache rows.
    pub cells: usize,
    /// Cache type (F16 or F32).
    pub cache: DType,
    /// NORM or NEOX.
    pub mode: RopeMode,
}

impl CaseSpec for RopeIntoCache {
    fn op(&self) -> &'static str {
        "ROPE_SET_ROWS"
    }
    fn dtype(&self) -> String {
        format!("{},{:?}", self.cache.name(), self.mode).to_lowercase()
    }
    fn build(&self, b: &mut Builder) -> Result<TensorId, TensorError> {
        let (hd, nh, nt) = (self.head_dim, self.heads, self.tokens);
        let k = b.leaf(DType::F32, &[hd, nh, nt], Init::Uniform { min: -1.0, max: 1.0 })?;
        let pos = b.leaf(DType::I32, &[nt], Init::Positions { n_ctx: 512 })?;
        let r = b.ctx.rope(k, pos, None, RopeParams::new(hd, self.mode, 10000.0))?;
        let rows = b.ctx.reshape(r, &[hd * nh, nt])?;
        let cache =
            b.leaf(self.cache, &[hd * nh, self.cells], Init::Uniform { min: -1.0, max: 1.0 })?;
        let idx = b.leaf(DType::I64, &[nt], Init::RowIds { n: self.cells, distinct: true })?;
        b.ctx.set_rows(cache, rows, idx)
    }
    fn tolerance(&self) -> Tolerance {
        Tolerance::Nmse(thresholds::DEFAULT)
    }
}

/// A decoding step's attention inputs as the llama graphs order them: Q `[head_dim, q_heads,
/// tokens]` rotated, K rotated into rows of an f32 cache, V's rows into another (the CUDA
/// backend's one-launch `rope_kv_store_op`); the output is both caches' rows, then the rotated
/// Q reshaped to the caches' row length (CONCAT).
#[derive(Debug, Clone)]
pub struct RopeKvStore {
    /// Head size.
    pub head_dim: usize,
    /// Query heads.
    pub q_heads: usize,
    /// KV heads.
    pub kv_heads: usize,
    /// Tokens.
    pub tokens: usize,
    /// Cache rows.
    pub cells: usize,
}

impl CaseSpec for RopeKvStore {
    fn op(&self) -> &'static str {
        "ROPE_KV_STORE"
    }
    fn dtype(&self) -> String {
        "f32".into()
    }
    fn build(&self, b: &mut Builder) -> Result<TensorId, TensorError> {
        let (hd, nt, row) = (self.head_dim, self.tokens, self.head_dim * self.kv_heads);
        let unit = Init::Uniform { min: -1.0, max: 1.0 };
        let q = b.leaf(DType::F32, &[hd, self.q_heads, nt], unit)?;
        let k = b.leaf(DType::F32, &[hd, self.kv_heads, nt], unit)?;
        let v = b.leaf(DType::F32, &[row, nt], unit)?;
        let pos = b.leaf(DType::I32, &[nt], Init::Positions { n_ctx: 512 })?;
        let p = RopeParams::new(hd, RopeMode::Norm, 10000.0);
        let ck = b.leaf(DType::F32, &[row, self.cells], unit)?;
        let cv = b.leaf(DType::F32, &[row, self.cells], unit)?;
        let ids = Init::RowIds { n: self.cells, distinct: true };
        let (ik, iv) = (b.leaf(DType::I64, &[nt], ids)?, b.leaf(DType::I64, &[nt], ids)?);
        let rq = b.ctx.rope(q, pos, None, p)?;
        let rk = b.ctx.rope(k, pos, None, p)?;
        let rows = b.ctx.reshape(rk, &[row, nt])?;
        let sk = b.ctx.set_rows(ck, rows, ik)?;
        let sv = b.ctx.set_rows(cv, v, iv)?;
        // Q's rotation, then K's store, then V's: the order of a model's graph.
        b.pins.extend([rq, sk, sv]);
        let caches = b.ctx.concat(sk, sv, 1)?;
        let q_rows = b.ctx.reshape(rq, &[row, hd * self.q_heads * nt / row])?;
        b.ctx.concat(caches, q_rows, 1)
    }
    fn tolerance(&self) -> Tolerance {
        Tolerance::Nmse(thresholds::DEFAULT)
    }
}

/// Decode attention over `n_kv` F16 cells (one query row of `heads` heads sharing `kv_heads`)
/// and the output projection of its output (RESHAPE to one column, MUL_MAT by `w` weights):
/// the CUDA backend's chunk merge writes the projection's Q8_1 activations itself.
#[derive(Debug, Clone)]
pub struct AttnProduct {
    /// Head size.
    pub head_dim: usize,
    /// Query heads.
    pub heads: usize,
    /// KV heads.
    pub kv_heads: usize,
    /// KV cells.
    pub n_kv: usize,
    /// Output projection's weight type.
    pub w: DType,
}

impl CaseSpec for AttnProduct {
    fn op(&self) -> &'static str {
        "ATTN_MUL_MAT"
    }
    fn dtype(&self) -> String {
        format!("f16,{}", self.w.name())
    }
    fn build(&self, b: &mut Builder) -> Result<TensorId, TensorError> {
        let (d, n_kv) = (self.head_dim, self.n_kv);
        let unit = Init::Uniform { min: -1.0, max: 1.0 };
        let q = b.leaf(DType::F32, &[d, 1, self.heads], unit)?;
        let k = b.leaf(DType::F16, &[d, n_kv, self.kv_heads], default_init(DType::F16))?;
        let v = b.leaf(DType::F16, &[d, n_kv, self.kv_heads], default_init(DType::F16))?;
        let mask = b.leaf(DType::F16, &[n_kv, 1], Init::KqMask)?;
        let fa = b.ctx.flash_attn_ext(q, k, v, Some(mask), 1.0 / (d as f32).sqrt(), 0.0, 0.0)?;
        let x = b.ctx.reshape(fa, &[d * self.heads, 1])?;
        let wo = b.leaf(self.w, &[d * self.heads, 64], default_init(self.w))?;
        b.ctx.mul_mat(wo, x)
    }
    fn tolerance(&self) -> Tolerance {
        Tolerance::Nmse(thresholds::MUL_MAT)
    }
}
