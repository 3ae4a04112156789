//! SIMD level, chosen at run time: the best the CPU has, or lower when forced with the
//! `TESSERA_SIMD` environment variable (`scalar`, `avx2`, `avx512`), so every path can be tested on
//! one machine. A scalar path always exists.

use std::fmt;

/// Instruction-set levels with kernels of their own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SimdLevel {
    /// Plain Rust, any CPU.
    Scalar,
    /// x86-64 AVX2 + FMA + F16C.
    Avx2,
    /// x86-64 AVX-512 F/BW/VL/DQ (+ VNNI where [`has_vnni`] says so), on top of AVX2.
    Avx512,
}

impl SimdLevel {
    /// Every level, lowest first.
    pub const ALL: [SimdLevel; 3] = [SimdLevel::Scalar, SimdLevel::Avx2, SimdLevel::Avx512];

    /// Lower-case name (`scalar`, `avx2`, `avx512`).
    pub fn name(self) -> &'static str {
        match self {
            SimdLevel::Scalar => "scalar",
            SimdLevel::Avx2 => "avx2",
            SimdLevel::Avx512 => "avx512",
        }
    }

    /// Parses a name as `TESSERA_SIMD` takes it.
    pub fn parse(s: &str) -> Option<SimdLevel> {
        SimdLevel::ALL.into_iter().find(|l| l.name().eq_ignore_ascii_case(s.trim()))
    }

    /// The best level this CPU supports.
    pub fn detect() -> SimdLevel {
        #[cfg(target_arch = "x86_64")]
        {
            let avx2 = is_x86_feature_detected!("avx2")
                && is_x86_feature_detected!("fma")
                && is_x86_feature_detected!("f16c");
            let avx512 = avx2
                && is_x86_feature_detected!("avx512f")
                && is_x86_feature_detected!("avx512bw")
                && is_x86_feature_detected!("avx512vl")
                && is_x86_feature_detected!("avx512dq");
            if avx512 {
                return SimdLevel::Avx512;
            }
            if avx2 {
                return SimdLevel::Avx2;
            }
        }
        SimdLevel::Scalar
    }

    /// The level to use: `TESSERA_SIMD` if set (never above what the CPU has), else [`detect`].
    ///
    /// [`detect`]: SimdLevel::detect
    pub fn from_env() -> SimdLevel {
        let best = SimdLevel::detect();
        match std::env::var("TESSERA_SIMD").ok().and_then(|s| SimdLevel::parse(&s)) {
            Some(forced) => forced.min(best),
            None => best,
        }
    }

    /// The levels this CPU can run, lowest first (what tests iterate over).
    pub fn available() -> Vec<SimdLevel> {
        let best = SimdLevel::detect();
        SimdLevel::ALL.into_iter().filter(|l| *l <= best).collect()
    }
}

/// The kernel family a SIMD level runs, in words (what `tessera bench` and `tessera run
/// --verbose` print, as llama-bench prints its CPU features). `vnni`: the CPU has AVX-512 VNNI.
pub fn kernel_family(level: SimdLevel, vnni: bool) -> &'static str {
    match level {
        SimdLevel::Scalar => "scalar (ggml's reference arithmetic)",
        SimdLevel::Avx2 => "AVX2 (ggml's AVX2 orders; tiled K-quant batches with maddubs)",
        SimdLevel::Avx512 if vnni => {
            "AVX-512 VNNI (tiled K-quant batches, 4x8 VNNI tiles, VNNI matrix-vector)"
        }
        SimdLevel::Avx512 => "AVX-512 (F16/F32 dots; AVX2 int8 kernels, no VNNI)",
    }
}

/// Whether the CPU has fused multiply-add. ggml's SIMD builds contract `a*b + c` into one
/// FMA, so kernels that reproduce its bits use `mul_add` where this holds.
pub(crate) fn has_fma() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Whether `TESSERA_CPU_HIDE` (a comma-separated list of `vnni`, `bf16`, read once) hides feature
/// `name` from detection, so one machine can run the paths of CPUs without it: with both
/// hidden, an AVX-512 VNNI CPU computes as an AVX-512 F/BW/VL/DQ one (Skylake-SP, Cascade
/// Lake without BF16...) does, which is how those paths are compared with a llama.cpp build
/// for that class.
#[cfg(target_arch = "x86_64")]
fn hidden(name: &str) -> bool {
    std::env::var("TESSERA_CPU_HIDE")
        .map(|v| v.split(',').any(|f| f.trim().eq_ignore_ascii_case(name)))
        .unwrap_or(false)
}

/// Whether the CPU has AVX-512 VNNI (int8 dot products in one instruction), unless
/// `TESSERA_CPU_HIDE` lists `vnni`.
pub fn has_vnni() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        static VNNI: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *VNNI.get_or_init(|| is_x86_feature_detected!("avx512vnni") && !hidden("vnni"))
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Whether the CPU has AVX512_BF16 (`vdpbf16ps`), unless `TESSERA_CPU_HIDE` lists `bf16`.
pub fn has_avx512_bf16() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        static BF16: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *BF16.get_or_init(|| is_x86_feature_detected!("avx512bf16") && !hidden("bf16"))
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

impl fmt::Display for SimdLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
