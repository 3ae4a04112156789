//! Which path a matrix product takes: one pure function of the weight, the activations and
//! the CPU ([`plan`]), so the choice can be read, tested as a table and printed
//! (`tessera run -v`) apart from the kernels that carry it out.
//!
//! The order of the checks is llama.cpp's, and each condition is the one llama.cpp decides
//! by (a faster path must give the bits of the one it replaces, see the `matmul` module's
//! docs): repacked weights take the repacked GEMV/GEMM chains; K-quant batches of 8+
//! columns take the tiled order; everything else is ggml's `vec_dot` family, carried by
//! whichever loop reads the weights fewest times for the batch's shape.

use crate::SimdLevel;
use tessera_tensor::DType;

/// The product's path (see [`plan`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Path {
    /// Repacked weights (stored eight rows interleaved), llama.cpp's repacked GEMV/GEMM
    /// chains (`interleaved`).
    Interleaved,
    /// llama.cpp's tiled order for K-quant (and grid i-quant) batches of 8+ columns
    /// (`kquant_tiled`).
    KquantTiled,
    /// One activation row with AVX-512 VNNI: the matrix-vector kernels of the Q8_0 and Q4_1
    /// families (`vnni_matvec`).
    VnniMatvec,
    /// 2+ activation rows with AVX-512 VNNI, in passes of up to 16 over cached blocks of
    /// weight rows (`vnni_few`).
    VnniFewRows,
    /// 2-7 activation rows reading the weights once through the one- and four-row dots.
    FewRows,
    /// One activation row, weight rows claimed in 64-row chunks.
    Matvec,
    /// ggml's loop: chunks claimed from a shared counter, 16x16 tiles of the type's dots
    /// (four-row dots and register tiles where the type has them).
    Chunked,
    /// Types without a dot kernel: tiles of weight rows dequantized to f32, f32 dots.
    Dequant,
}

impl Path {
    /// A short name (`interleaved`, `kquant-tiled`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Path::Interleaved => "interleaved",
            Path::KquantTiled => "kquant-tiled",
            Path::VnniMatvec => "vnni-matvec",
            Path::VnniFewRows => "vnni-few-rows",
            Path::FewRows => "few-rows",
            Path::Matvec => "matvec",
            Path::Chunked => "chunked",
            Path::Dequant => "dequant",
        }
    }
}

impl std::fmt::Display for Path {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The weight (src0) of a product, as the plan sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Weight {
    /// Its type.
    pub dtype: DType,
    /// Whether it is one matrix (`ne[2] = ne[3] = 1`), not a stack broadcast over the batch.
    pub matrix: bool,
    /// Whether it lives in the CPU's repacked buffer ([`crate::RepackBufferType`]).
    pub repacked: bool,
}

/// The activations (src1) of a product, as the plan sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Batch {
    /// Columns of one matrix (`ne[1]`).
    pub cols: usize,
    /// Rows in all (`ne[1] · ne[2] · ne[3]`).
    pub rows: usize,
    /// Batch-invariant arithmetic asked for ([`crate::ComputeParams::batch_invariant`]).
    pub batch_invariant: bool,
}

impl Batch {
    /// One matrix of `cols` columns, arithmetic as llama.cpp's.
    pub fn matrix(cols: usize) -> Batch {
        Batch { cols, rows: cols, batch_invariant: false }
    }
}

/// The CPU the product runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cpu {
    /// The SIMD level kernels run at.
    pub level: SimdLevel,
    /// Whether AVX-512 VNNI kernels run (the AVX-512 level on a CPU with VNNI).
    pub vnni: bool,
}

impl Cpu {
    /// `level` on this CPU (lowered to what it has; VNNI where it has it at AVX-512).
    pub fn at(level: SimdLevel) -> Cpu {
        let level = level.min(SimdLevel::detect());
        Cpu { level, vnni: level >= SimdLevel::Avx512 && crate::has_vnni() }
    }
}

/// The path of the product of `w` with `b` on `cpu` (module docs).
pub fn plan(w: Weight, b: Batch, cpu: Cpu) -> Path {
    let row = super::types::row(w.dtype);
    let has_dot = row.is_some();
    #[cfg(target_arch = "x86_64")]
    {
        let x86 = row.map(|r| &r.x86);
        let simd = cpu.level >= SimdLevel::Avx2;
        let vnni = cpu.level >= SimdLevel::Avx512 && cpu.vnni;
        if w.repacked && simd && w.matrix && x86.is_some_and(|x| x.repack.is_some()) {
            return Path::Interleaved;
        }
        let tiled = w.matrix && b.cols >= 8 && x86.is_some_and(|x| x.tiled.is_some());
        if simd && !b.batch_invariant && tiled {
            return Path::KquantTiled;
        }
        let matvec = x86.and_then(|x| x.vnni_matvec);
        if vnni && b.rows == 1 && matvec.is_some() {
            return Path::VnniMatvec;
        }
        let batch_2d = b.rows == b.cols;
        if simd && b.rows >= 2 && batch_2d && w.matrix && !tiled && w.dtype != DType::F16 {
            let pass = b.rows.min(super::vnni_few::MAX_ROWS);
            let few = x86.and_then(|x| x.vnni_few).zip(matvec);
            if vnni && few.and_then(|(k, mv)| super::vnni_few::Few::new(k, mv, pass)).is_some() {
                return Path::VnniFewRows;
            }
            if b.rows < 8 && has_dot {
                return Path::FewRows;
            }
        }
        if simd && b.rows == 1 && w.matrix && has_dot {
            return Path::Matvec;
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (b, cpu);
    if has_dot {
        Path::Chunked
    } else {
        Path::Dequant
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use DType::*;
    use Path::*;
    use SimdLevel::*;

    /// The path of a 2-D weight at each batch size of [`ROWS`].
    fn paths(dtype: DType, repacked: bool, cpu: Cpu) -> [Path; 5] {
        let w = Weight { dtype, matrix: true, repacked };
        ROWS.map(|n| plan(w, Batch::matrix(n), cpu))
    }

    const ROWS: [usize; 5] = [1, 2, 7, 8, 64];

    #[test]
    fn the_table() {
        let scalar = Cpu { level: Scalar, vnni: false };
        let avx2 = Cpu { level: Avx2, vnni: false };
        let avx512 = Cpu { level: Avx512, vnni: false };
        let vnni = Cpu { level: Avx512, vnni: true };
        // (type, repacked, cpu, paths at 1, 2, 7, 8, 64 rows)
        let table = [
            (Q4_0, false, scalar, [Chunked; 5]),
            (Q4_0, false, avx2, [Matvec, FewRows, FewRows, Chunked, Chunked]),
            (Q4_0, true, avx2, [Interleaved; 5]),
            (Q4_0, false, vnni, [VnniMatvec, VnniFewRows, VnniFewRows, VnniFewRows, VnniFewRows]),
            (Q8_0, false, avx512, [Matvec, FewRows, FewRows, Chunked, Chunked]),
            (Q8_0, false, vnni, [VnniMatvec, VnniFewRows, VnniFewRows, VnniFewRows, VnniFewRows]),
            (Q4_K, true, avx2, [Interleaved; 5]),
            (Q4_K, false, avx2, [Matvec, FewRows, FewRows, KquantTiled, KquantTiled]),
            (Q6_K, false, vnni, [Matvec, FewRows, FewRows, KquantTiled, KquantTiled]),
            (Q6_K, false, scalar, [Chunked; 5]),
            (F16, false, avx2, [Matvec, Chunked, Chunked, Chunked, Chunked]),
            (F32, false, avx512, [Matvec, FewRows, FewRows, Chunked, Chunked]),
            (I32, false, avx2, [Dequant; 5]),
        ];
        for (dtype, repacked, cpu, want) in table {
            assert_eq!(paths(dtype, repacked, cpu), want, "{dtype} repacked {repacked} {cpu:?}");
        }
    }

    #[test]
    fn stacks_and_invariance() {
        let avx2 = Cpu { level: Avx2, vnni: false };
        // A stack broadcast over the batch (not one matrix) takes ggml's loop.
        let stack = Weight { dtype: Q4_K, matrix: false, repacked: true };
        assert_eq!(plan(stack, Batch::matrix(64), avx2), Chunked);
        assert_eq!(plan(stack, Batch::matrix(1), avx2), Chunked);
        // Batch-invariant arithmetic never takes the tiled order.
        let w = Weight { dtype: Q4_K, matrix: true, repacked: false };
        let b = Batch { cols: 64, rows: 64, batch_invariant: true };
        assert_eq!(plan(w, b, avx2), Chunked);
        // Activations over several matrices (ne2 > 1): no few-rows loop.
        let b = Batch { cols: 2, rows: 4, batch_invariant: false };
        assert_eq!(plan(Weight { dtype: Q8_0, matrix: true, repacked: false }, b, avx2), Chunked);
    }
}
