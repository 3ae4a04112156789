//! Input data: a small deterministic generator and the ways a case's leaf tensors are filled
//! (test-backend-ops' `init_tensor_uniform`, `init_tensor_kq_mask`, row ids, positions).
//!
//! Every case seeds its own generator from its name, so a failure reproduces exactly with
//! `--ops` narrowed to that case, and adding a case never changes the data of another.

use tessera_tensor::graph::TensorDesc;
use tessera_tensor::quant::{can_quantize, f32_to_f16};
use tessera_tensor::{quantize, DType};

/// SplitMix64: tiny, fast, and good enough for test data.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator seeded from `seed`.
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    /// A generator seeded from the bytes of `name` (FNV-1a).
    pub fn from_name(name: &str) -> Self {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in name.bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        Rng(h)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform f32 in `[min, max)`.
    pub fn uniform(&mut self, min: f32, max: f32) -> f32 {
        (f64::from(min) + (f64::from(max) - f64::from(min)) * self.unit()) as f32
    }

    /// Uniform integer in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// Shuffles `v` in place (Fisher-Yates).
    pub fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            v.swap(i, self.below(i + 1));
        }
    }
}

/// How a leaf tensor is filled before the graph runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Init {
    /// Uniform values in `[min, max)`, converted or quantized to the tensor's type.
    Uniform {
        /// Lower bound.
        min: f32,
        /// Upper bound.
        max: f32,
    },
    /// Integer row indexes in `0..n` (I32 or I64). `distinct`: each row of the index tensor is
    /// a shuffled subset of `0..n` (SET_ROWS must not write one row twice), else drawn with
    /// repetition (GET_ROWS).
    RowIds {
        /// Number of rows indexed.
        n: usize,
        /// Whether the indexes of one row are all different.
        distinct: bool,
    },
    /// I32 positions in `0..n_ctx` (ROPE).
    Positions {
        /// Exclusive upper bound.
        n_ctx: usize,
    },
    /// An attention mask: uniform in `[-1, 1)` with runs of `-inf` and of `0`, as
    /// `init_tensor_kq_mask`, except that the first cell of every row stays finite so no row is
    /// masked completely (whose result ggml leaves undefined).
    KqMask,
    /// Each row a shuffled permutation of `0..ne0` as floats: no ties, so ARGMAX is exact.
    Permutation,
    /// Random block bytes with a sane leading f16 scale: the i-quants without a quantizer
    /// (every bit pattern of their index fields is a valid grid entry).
    RandomBlocks,
}

/// Bytes for a contiguous tensor of `desc`'s type and shape, filled as `init` says.
///
/// # Panics
/// When `init` does not fit the type (a bug in a case definition).
pub fn fill(desc: &TensorDesc, init: Init, rng: &mut Rng) -> Vec<u8> {
    let n = desc.n_elements();
    let ne0 = desc.ne[0];
    match init {
        Init::Uniform { min, max } => {
            let v: Vec<f32> = (0..n).map(|_| rng.uniform(min, max)).collect();
            store_f32(desc.dtype, &v)
        }
        Init::RowIds { n: rows, distinct } => {
            let mut ids = Vec::with_capacity(n);
            for _ in 0..n / ne0.max(1) {
                if distinct {
                    let mut all: Vec<i64> = (0..rows as i64).collect();
                    rng.shuffle(&mut all);
                    assert!(ne0 <= rows, "{ne0} distinct indexes out of {rows}");
                    ids.extend_from_slice(&all[..ne0]);
                } else {
                    ids.extend((0..ne0).map(|_| rng.below(rows) as i64));
                }
            }
            store_ints(desc.dtype, &ids)
        }
        Init::Positions { n_ctx } => {
            let ids: Vec<i64> = (0..n).map(|_| rng.below(n_ctx) as i64).collect();
            store_ints(desc.dtype, &ids)
        }
        Init::KqMask => {
            let mut v: Vec<f32> = (0..n).map(|_| rng.uniform(-1.0, 1.0)).collect();
            let rows = n / ne0;
            // About a fifth of the cells in runs of -inf or 0, as init_tensor_kq_mask.
            let runs = (n / 5 / 16).max(1);
            for _ in 0..runs {
                let (r, c) = (rng.below(rows), rng.below(ne0));
                let value = if rng.below(2) == 0 { f32::NEG_INFINITY } else { 0.0 };
                for x in &mut v[r * ne0 + c..r * ne0 + (c + 16).min(ne0)] {
                    *x = value;
                }
            }
            for r in 0..rows {
                if v[r * ne0] == f32::NEG_INFINITY {
                    v[r * ne0] = 0.0;
                }
            }
            store_f32(desc.dtype, &v)
        }
        Init::Permutation => {
            let mut v = Vec::with_capacity(n);
            for _ in 0..n / ne0 {
                let mut row: Vec<f32> = (0..ne0).map(|i| i as f32).collect();
                rng.shuffle(&mut row);
                v.extend_from_slice(&row);
            }
            store_f32(desc.dtype, &v)
        }
        Init::RandomBlocks => {
            let dt = desc.dtype;
            assert!(dt.is_quantized(), "random blocks of {dt}");
            let mut bytes: Vec<u8> =
                (0..desc.row_size() * desc.n_rows()).map(|_| rng.next_u64() as u8).collect();
            for block in bytes.chunks_exact_mut(dt.type_size()) {
                let d = f32_to_f16(rng.uniform(0.01, 0.1));
                block[..2].copy_from_slice(&d.to_le_bytes());
            }
            bytes
        }
    }
}

/// The default filling for a type: uniform in `[-1, 1)`, or random blocks for the i-quants that
/// cannot be quantized without an importance matrix.
pub fn default_init(dtype: DType) -> Init {
    if dtype.is_quantized() && !can_quantize(dtype) {
        Init::RandomBlocks
    } else {
        Init::Uniform { min: -1.0, max: 1.0 }
    }
}

/// `values` converted (F32/F16/BF16) or quantized (with tessera-tensor's reference quantizers)
/// to `dtype`.
///
/// # Panics
/// When `dtype` has no quantizer or `values` is not a whole number of blocks.
pub fn store_f32(dtype: DType, values: &[f32]) -> Vec<u8> {
    quantize(dtype, values)
        .unwrap_or_else(|e| panic!("cannot store {} values as {dtype}: {e}", values.len()))
}

fn store_ints(dtype: DType, values: &[i64]) -> Vec<u8> {
    match dtype {
        DType::I32 => values.iter().flat_map(|&v| (v as i32).to_le_bytes()).collect(),
        DType::I64 => values.iter().flat_map(|&v| v.to_le_bytes()).collect(),
        d => panic!("integer data for a {d} tensor"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_tensor::graph::Context;

    #[test]
    fn generator_is_deterministic_and_uniform_enough() {
        let (mut a, mut b) = (Rng::from_name("x"), Rng::from_name("x"));
        let va: Vec<f32> = (0..1000).map(|_| a.uniform(-1.0, 1.0)).collect();
        let vb: Vec<f32> = (0..1000).map(|_| b.uniform(-1.0, 1.0)).collect();
        assert_eq!(va, vb);
        let mean = va.iter().map(|&x| f64::from(x)).sum::<f64>() / 1000.0;
        assert!(mean.abs() < 0.1, "mean {mean}");
        assert!(va.iter().all(|&x| (-1.0..1.0).contains(&x)));
    }

    #[test]
    fn distinct_row_ids_are_distinct_per_row() {
        let mut ctx = Context::new();
        let t = ctx.new_tensor(DType::I64, &[5, 3]).unwrap();
        let bytes = fill(ctx.get(t), Init::RowIds { n: 7, distinct: true }, &mut Rng::new(1));
        let ids: Vec<i64> =
            bytes.chunks_exact(8).map(|b| i64::from_le_bytes(b.try_into().unwrap())).collect();
        for row in ids.chunks(5) {
            let mut r = row.to_vec();
            r.sort_unstable();
            r.dedup();
            assert_eq!(r.len(), 5);
            assert!(row.iter().all(|&i| (0..7).contains(&i)));
        }
    }

    #[test]
    fn masks_never_hide_a_whole_row() {
        let mut ctx = Context::new();
        let t = ctx.new_tensor(DType::F16, &[32, 64]).unwrap();
        let bytes = fill(ctx.get(t), Init::KqMask, &mut Rng::new(2));
        let v = tessera_tensor::dequantize(DType::F16, &bytes).unwrap();
        assert!(v.iter().any(|x| x.is_infinite()));
        assert!(v.chunks(32).all(|row| row.iter().any(|x| x.is_finite())));
    }
}
