//! The kernels' arithmetic without a GPU: `kernels/types.cuh` (the generic kernels' per-element
//! dequantization) and `kernels/vecdotq.cuh` (the MMVQ kernels' int8 dot products) compiled for
//! the CPU with the machine's C++ compiler, behind a shim for the few CUDA intrinsics they use,
//! and checked against `tessera_tensor`'s quantizers and dequantizers (ggml's, bit for bit):
//! every dequantized value equal, every int8 dot within a small fraction of the f64 dot.
//!
//! Skipped, with a note, where no C++ compiler is found (`CXX`, else `c++`, `g++`);
//! `REQUIRE_CXX=1` makes that a failure.

mod common;

use common::{run, values, write};
use std::path::{Path, PathBuf};
use tessera_backend_cuda::types::{Class, TYPES};
use tessera_tensor::quant::{dequantize, quantize};
use tessera_tensor::DType;

/// `deq TYPE N W`: the N values of row W through `ld_row`; `dot TYPE N W Y`: the sum over
/// the row's 32-value blocks and their four lanes of the type's int8 dot with Q8_1 row Y.
const MAIN: &str = r#"
// As quant.cu's MMVQ: 32-value block i is sub-block i % SUB of weight block i / SUB.
#define DOT(T, BYTES, SUB, F) case T: for (int p = 0; p < 4; ++p) s += F(w + (i64)(i / SUB) * BYTES, i % SUB, y + (i64)i * 36, p); break;
int main(int argc, char **argv) {
    const int type = atoi(argv[2]);
    const long n = atol(argv[3]);
    std::vector<u8> wv = slurp(argv[4]);
    const u8 *w = wv.data();
    if (!strcmp(argv[1], "deq")) {
        for (long i = 0; i < n; ++i) printf("%08x\n", __float_as_uint(ld_row(type, w, i, 0)));
        return 0;
    }
    std::vector<u8> yv = slurp(argv[5]);
    const u8 *y = yv.data();
    double total = 0.0;
    for (long i = 0; i < n / 32; ++i) {
        float s = 0.0f;
        switch (type) {
            DOT(T_Q4_0, Q4_0_BYTES, 1, vdot_q4_0)
            DOT(T_Q4_1, Q4_1_BYTES, 1, vdot_q4_1)
            DOT(T_Q5_0, Q5_0_BYTES, 1, vdot_q5_0)
            DOT(T_Q5_1, Q5_1_BYTES, 1, vdot_q5_1)
            DOT(T_Q8_0, Q8_0_BYTES, 1, vdot_q8_0)
            DOT(T_IQ4_NL, IQ4_NL_BYTES, 1, vdot_iq4_nl)
            DOT(T_MXFP4, MXFP4_BYTES, 1, vdot_mxfp4)
            DOT(T_Q2_K, Q2_K_BYTES, 8, vdot_q2_k)
            DOT(T_Q3_K, Q3_K_BYTES, 8, vdot_q3_k)
            DOT(T_Q4_K, Q4_K_BYTES, 8, vdot_q4_k)
            DOT(T_Q5_K, Q5_K_BYTES, 8, vdot_q5_k)
            DOT(T_Q6_K, Q6_K_BYTES, 8, vdot_q6_k)
            DOT(T_IQ4_XS, IQ4_XS_BYTES, 8, vdot_iq4_xs)
            default: fprintf(stderr, "no int8 dot for type %d\n", type); return 3;
        }
        total += s;
    }
    printf("%.9g\n", total);
    return 0;
}
"#;

/// Builds the harness in `dir`; `None` (after a note) without a compiler.
fn harness(dir: &Path) -> Option<PathBuf> {
    common::harness(dir, "harness", "", &["types.cuh", "vecdotq.cuh"], MAIN)
}

#[test]
fn dequantization_and_int8_dots_match_ggml() {
    let dir = std::env::temp_dir().join(format!("tessera-host-kernels-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let Some(exe) = harness(&dir) else { return };
    let n = 512;
    let mut checked = 0;
    for row in TYPES.iter().filter(|r| r.class == Class::Block) {
        let t = row.dtype;
        for seed in 0..4u64 {
            let w = quantize(t, &values(n, seed * 31 + t.id() as u64))
                .unwrap_or_else(|e| panic!("{t}: {e}"));
            let wf = write(&dir, "w.bin", &w);
            let want = dequantize(t, &w).unwrap();
            // Every value of the generic kernels' dequantization, bit for bit.
            let got: Vec<u32> = run(&exe, &["deq", &t.id().to_string(), &n.to_string(), &wf])
                .lines()
                .map(|l| u32::from_str_radix(l, 16).unwrap())
                .collect();
            assert_eq!(got.len(), n, "{t}");
            for (i, (g, e)) in got.iter().zip(&want).enumerate() {
                assert_eq!(*g, e.to_bits(), "{t} value {i}: {} != {e}", f32::from_bits(*g));
            }
            let Some(_) = row.mmvq else { continue };
            // The int8 dot against activations quantized to Q8_1, as the kernels read them.
            let y = quantize(DType::Q8_1, &values(n, seed + 1000)).unwrap();
            let yf = write(&dir, "y.bin", &y);
            let yd = dequantize(DType::Q8_1, &y).unwrap();
            let exact: f64 = want.iter().zip(&yd).map(|(a, b)| f64::from(*a) * f64::from(*b)).sum();
            let scale: f64 =
                want.iter().zip(&yd).map(|(a, b)| (f64::from(*a) * f64::from(*b)).abs()).sum();
            let got: f64 = run(&exe, &["dot", &t.id().to_string(), &n.to_string(), &wf, &yf])
                .trim()
                .parse()
                .unwrap();
            // The offsets' sums come from Q8_1's f16 sum where llama.cpp's do (Q4_0, Q4_1,
            // Q5_0, Q5_1): a few thousandths of the magnitude at most.
            let err = (got - exact).abs() / scale.max(1e-9);
            assert!(err < 2e-3, "{t} seed {seed}: int8 dot {got}, f64 {exact} (error {err:.2e})");
            checked += 1;
        }
    }
    assert!(checked >= 40, "only {checked} int8 dots checked");
    let _ = std::fs::remove_dir_all(&dir);
}
