//! The CUDA kernel sources, embedded in the binary, and the entry points each defines.
//!
//! Every source is compiled with [`PRELUDE`] in front (fixed-width types, half conversion by
//! inline PTX, warp and block reductions, ggml's block sizes). Entry points are `extern "C"`,
//! so their names appear as-is in the CUBIN.

/// Shared definitions prepended to every source.
pub const PRELUDE: &str = include_str!("../kernels/prelude.cuh");

/// One `.cu` file.
#[derive(Debug, Clone, Copy)]
pub struct KernelSource {
    /// The file's name (`elementwise.cu`).
    pub name: &'static str,
    /// Its text.
    pub src: &'static str,
    /// The `__global__` functions it defines.
    pub entry_points: &'static [&'static str],
}

impl KernelSource {
    /// The text NVRTC compiles: the prelude, then the file.
    pub fn full_source(&self) -> String {
        format!("#line 1 \"prelude.cuh\"\n{PRELUDE}\n#line 1 \"{}\"\n{}", self.name, self.src)
    }
}

/// Every kernel file.
pub const ALL: &[KernelSource] = &[
    KernelSource {
        name: "elementwise.cu",
        src: include_str!("../kernels/elementwise.cu"),
        entry_points: &[
            "add_f32",
            "sub_f32",
            "mul_f32",
            "div_f32",
            "silu_f32",
            "gelu_f32",
            "relu_f32",
            "neg_f32",
            "sqr_f32",
            "sqrt_f32",
            "tanh_f32",
            "scale_f32",
            "swiglu_f32",
            "geglu_f32",
            "cpy_f32_f16",
            "cpy_f16_f32",
        ],
    },
    KernelSource {
        name: "norm.cu",
        src: include_str!("../kernels/norm.cu"),
        entry_points: &["rms_norm_f32", "norm_f32"],
    },
    KernelSource {
        name: "rope.cu",
        src: include_str!("../kernels/rope.cu"),
        entry_points: &["rope_f32"],
    },
    KernelSource {
        name: "softmax.cu",
        src: include_str!("../kernels/softmax.cu"),
        entry_points: &["soft_max_f32"],
    },
    KernelSource {
        name: "quant.cu",
        src: include_str!("../kernels/quant.cu"),
        entry_points: &[
            "get_rows_q4_0",
            "get_rows_q4_1",
            "get_rows_q5_0",
            "get_rows_q5_1",
            "get_rows_q8_0",
            "get_rows_q4_k",
            "get_rows_q6_k",
            "get_rows_f32",
            "get_rows_f16",
            "dequant_f16_q4_0",
            "dequant_f16_q4_1",
            "dequant_f16_q5_0",
            "dequant_f16_q5_1",
            "dequant_f16_q8_0",
            "dequant_f16_q4_k",
            "dequant_f16_q6_k",
            "quantize_q8_1",
            "mmvq_q4_0",
            "mmvq_q5_0",
            "mmvq_q8_0",
        ],
    },
];

/// The kernel file defining `entry`, if any.
pub fn find(entry: &str) -> Option<&'static KernelSource> {
    ALL.iter().find(|k| k.entry_points.contains(&entry))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Entry point names are unique across files and each is found in its own file's text
    /// (directly or as the name a macro is invoked with); the CUBIN test (`tests/nvrtc.rs`)
    /// checks that compiling really defines each one.
    #[test]
    fn entry_points_are_unique_and_named_in_their_sources() {
        let mut seen = std::collections::HashSet::new();
        for k in ALL {
            for e in k.entry_points {
                assert!(seen.insert(*e), "{e} listed twice");
                assert_eq!(find(e).map(|f| f.name), Some(k.name));
                let stem = ["get_rows_", "dequant_f16_", "mmvq_", "mmv_", "cpy_"]
                    .iter()
                    .find_map(|p| e.strip_prefix(p).filter(|t| !t.starts_with('f')))
                    .unwrap_or(e);
                assert!(k.src.contains(stem), "{}: {e} not in the source", k.name);
            }
        }
    }
}
