//! Which fast paths may run (`TESSERA_CUDA_PATHS`): every fast path has the generic kernels
//! behind it, so one run on a GPU can compare each path with the baseline and isolate a
//! failing one.
//!
//! The variable holds a comma-separated list: `all` (the default), `generic` (no fast path),
//! path names (only those), or names with a leading `-` (all but those), for example
//! `TESSERA_CUDA_PATHS=-mmvq`.

use crate::error::CudaError;

/// A fast path the plan may choose instead of the generic kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FastPath {
    /// Int8 matrix-vector products: the activation row quantized to Q8_1 once, dp4a dots.
    Mmvq,
    /// The float (F16, BF16, F32) matrix-vector kernels, 1-8 columns.
    Mmv,
    /// A repeated list of launches replayed from a captured CUDA graph.
    Graphs,
    /// Windows of nodes run by one fused kernel (RMS_NORM then MUL).
    Fused,
    /// Decode attention split over the KV cells (flash decoding, `fattn_vec.cu`).
    AttnVec,
    /// Batched products (more than 8 columns) through cuBLAS: weights and activations in F16,
    /// tensor cores, F32 accumulation.
    Gemm,
    /// Prompt attention over K/V tiles in shared memory (`fattn_tile.cu`).
    AttnTile,
    /// Batched quantized products on int8 tensor cores (`mmq.cu`, sm_80+): the activations
    /// quantized to Q8_1 once, each weight block read once per 32 columns.
    Mmq,
    /// Prompt attention on the f16 tensor cores (`fattn_mma.cu`, sm_80+, F16 caches).
    AttnMma,
    /// Decode attention on the f16 tensor cores (`fattn_mma_dec_op`, sm_80+, F16 caches).
    AttnMmaDec,
    /// The int8 matrix-vector kernels' long rows split over several warps
    /// ([`super::mmvq_warps_per_row`]; off: one warp a row).
    MmvqSplit,
    /// Programmatic dependent launch (sm_90+): a kernel following another in a list starts
    /// while it runs, prefetching its weights, and waits for it in `pdl_start`
    /// ([`super::early_launches`]).
    Pdl,
}

impl FastPath {
    /// Every fast path.
    pub const ALL: [FastPath; 12] = [
        FastPath::Mmvq,
        FastPath::Mmv,
        FastPath::Graphs,
        FastPath::Fused,
        FastPath::AttnVec,
        FastPath::Gemm,
        FastPath::AttnTile,
        FastPath::Mmq,
        FastPath::AttnMma,
        FastPath::AttnMmaDec,
        FastPath::MmvqSplit,
        FastPath::Pdl,
    ];

    /// Its name in `TESSERA_CUDA_PATHS` and in logs.
    pub fn name(self) -> &'static str {
        match self {
            FastPath::Mmvq => "mmvq",
            FastPath::Mmv => "mmv",
            FastPath::Graphs => "graphs",
            FastPath::Fused => "fused",
            FastPath::AttnVec => "fattn-vec",
            FastPath::Gemm => "gemm",
            FastPath::AttnTile => "fattn-tile",
            FastPath::Mmq => "mmq",
            FastPath::AttnMma => "fattn-mma",
            FastPath::AttnMmaDec => "fattn-mma-dec",
            FastPath::MmvqSplit => "mmvq-split",
            FastPath::Pdl => "pdl",
        }
    }

    fn bit(self) -> u32 {
        1 << (self as u32)
    }
}

/// The fast paths that may run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Paths(u32);

impl Default for Paths {
    fn default() -> Self {
        Paths::all()
    }
}

impl Paths {
    /// Every fast path on.
    pub fn all() -> Paths {
        Paths(FastPath::ALL.iter().fold(0, |m, p| m | p.bit()))
    }

    /// Only the generic kernels.
    pub fn generic() -> Paths {
        Paths(0)
    }

    /// Whether `p` may run.
    pub fn allows(self, p: FastPath) -> bool {
        self.0 & p.bit() != 0
    }

    /// Reads a `TESSERA_CUDA_PATHS` value (module docs); an unknown name is the error.
    pub fn parse(spec: &str) -> Result<Paths, CudaError> {
        let spec = spec.trim();
        if spec.is_empty() || spec == "all" {
            return Ok(Paths::all());
        }
        if spec == "generic" {
            return Ok(Paths::generic());
        }
        let find = |n: &str| {
            FastPath::ALL.into_iter().find(|p| p.name() == n).ok_or_else(|| {
                let names: Vec<_> = FastPath::ALL.iter().map(|p| p.name()).collect();
                CudaError::Config(format!(
                    "TESSERA_CUDA_PATHS: unknown path '{n}' (all, generic, or of {})",
                    names.join(", ")
                ))
            })
        };
        let items: Vec<&str> = spec.split(',').map(str::trim).filter(|s| !s.is_empty()).collect();
        let negative = items.iter().all(|i| i.starts_with('-'));
        if !negative && items.iter().any(|i| i.starts_with('-')) {
            return Err(CudaError::Config(format!(
                "TESSERA_CUDA_PATHS={spec}: give the paths to keep or, each with '-', those to \
                 turn off, not both"
            )));
        }
        let mut mask = if negative { Paths::all().0 } else { 0 };
        for i in items {
            let p = find(i.trim_start_matches('-'))?;
            if negative {
                mask &= !p.bit();
            } else {
                mask |= p.bit();
            }
        }
        Ok(Paths(mask))
    }

    /// The paths of `TESSERA_CUDA_PATHS` (all when unset).
    pub fn from_env() -> Result<Paths, CudaError> {
        match std::env::var("TESSERA_CUDA_PATHS") {
            Ok(s) => Paths::parse(&s),
            Err(_) => Ok(Paths::all()),
        }
    }

    /// The names of the allowed paths (`generic` when none).
    pub fn describe(self) -> String {
        let on: Vec<_> =
            FastPath::ALL.iter().filter(|p| self.allows(**p)).map(|p| p.name()).collect();
        if on.is_empty() {
            "generic".into()
        } else {
            on.join(",")
        }
    }
}
